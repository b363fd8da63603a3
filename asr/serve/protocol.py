"""Wenet runtime WebSocket protocol: client messages in, JSON replies out.

Client -> server:
    text   {"signal": "start", "nbest": N, "continuous_decoding": bool,
            "hotwords": ["phrase", "phrase:score", {"phrase": "...", "score": S}, ...],
            "segment_times": bool}  (all optional; hotwords bias this connection only, merged with
            the server's own list; segment_times adds "segment" to final results, see below)
    binary 16-bit little-endian mono PCM at the model's sample rate, any number of frames
    text   {"signal": "end"}
Server -> client (text):
    {"status": "ok", "type": "server_ready"}                       after start
    {"status": "ok", "type": "partial_result", "nbest": "<json>"}  while decoding
    {"status": "ok", "type": "final_result", "nbest": "<json>"}    at an endpoint / the end
    {"status": "ok", "type": "speech_end"}                         recognition over
    {"status": "failed", "message": "..."}                         then the server closes
``nbest`` is a JSON *string* holding a list of {"sentence": str} and, in final
results, "word_pieces": [{"word": str, "start": ms, "end": ms}] (integers, stream
time), exactly as Wenet's ``websocket_server.cc`` serializes it.

A client that asked for ``segment_times`` also gets, in each final result,
``"segment": {"index": i, "start": ms, "end": ms}``: the utterance's index in the stream and
the stream time it covers, its end being where its endpoint fired (sherpa-onnx's server
reports a segment index and start time the same way). Replies stay Wenet's otherwise: Wenet
sends no such field, so its clients never ask for it.
"""

from __future__ import annotations

import json
import reprlib
from dataclasses import dataclass

import numpy as np

from asr.decode.hotwords import parse_entry
from asr.serve.result import Result


class ProtocolError(ValueError):
    """A client message the protocol does not allow; the message goes back to the client."""


@dataclass(frozen=True)
class Start:
    nbest: int = 1
    continuous_decoding: bool = False
    hotwords: tuple[tuple[str, float | None], ...] = ()  # (phrase, score per token or None)
    segment_times: bool = False  # final results carry the utterance's stream span


@dataclass(frozen=True)
class End:
    pass


def parse_text(message: str, max_nbest: int) -> Start | End:
    """Parse a text frame into :class:`Start` or :class:`End`; :class:`ProtocolError` names the problem."""
    try:
        obj = json.loads(message)
    except json.JSONDecodeError as err:
        raise ProtocolError(f"malformed JSON ({err.msg} at character {err.pos})") from None
    # json's decoder recurses once per nesting level: '[' * 10000 exhausts the stack (RecursionError),
    # and an integer of more than 4300 digits is refused with a plain ValueError. Both are the client's
    # malformed message, not the server's internal error.
    except RecursionError:
        raise ProtocolError("malformed JSON (nested too deeply)") from None
    except ValueError as err:
        raise ProtocolError(f"malformed JSON ({reprlib.repr(str(err))})") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"expected a JSON object, got {type(obj).__name__}")
    if "signal" not in obj:
        raise ProtocolError('text message has no "signal" field (expected "start" or "end")')
    signal = obj["signal"]
    if signal == "end":
        return End()
    if signal != "start":
        raise ProtocolError(f'unknown signal {reprlib.repr(signal)}; expected "start" or "end"')
    nbest = obj.get("nbest", 1)
    if isinstance(nbest, bool) or not isinstance(nbest, int) or not 1 <= nbest <= max_nbest:
        raise ProtocolError(f"nbest must be an integer in [1, {max_nbest}], got {reprlib.repr(nbest)}")
    flags = {name: obj.get(name, False) for name in ("continuous_decoding", "segment_times")}
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise ProtocolError(f"{name} must be true or false, got {reprlib.repr(value)}")
    return Start(nbest=nbest, hotwords=_hotwords(obj.get("hotwords", [])), **flags)


def _hotwords(value) -> tuple[tuple[str, float | None], ...]:
    """The start signal's hotword list: strings ("phrase" or "phrase:score") or {"phrase", "score"} objects."""
    if not isinstance(value, list):
        raise ProtocolError(f"hotwords must be a list of phrases, got {type(value).__name__}")
    entries = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            entries.append(parse_entry(item))
        elif isinstance(item, dict) and isinstance(item.get("phrase"), str) and set(item) <= {"phrase", "score"}:
            score = item.get("score")
            if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))):
                raise ProtocolError(f"hotwords[{i}]: score must be a number, got {reprlib.repr(score)}")
            entries.append((item["phrase"], None if score is None else float(score)))
        else:
            raise ProtocolError(f'hotwords[{i}] must be a string or {{"phrase": str, "score": number}}, '
                                f"got {reprlib.repr(item)}")
    return tuple(entries)


def pcm16_to_float(data: bytes) -> np.ndarray:
    """Little-endian int16 PCM bytes -> (n,) float32 in [-1, 1)."""
    if len(data) % 2:
        raise ProtocolError(f"binary frame of {len(data)} bytes is not 16-bit PCM (odd byte count)")
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0


def check_finite(samples: np.ndarray) -> None:
    """ValueError saying how many of the samples are NaN or inf (no PCM value stands for them)."""
    bad = int(np.count_nonzero(~np.isfinite(samples)))
    if bad:
        raise ValueError(f"{bad} of {np.size(samples)} samples are not finite numbers (NaN or inf)")


def float_to_pcm16(samples: np.ndarray) -> bytes:
    """(n,) float in [-1, 1] -> little-endian int16 PCM bytes (clipped); ValueError for NaN or inf samples."""
    check_finite(samples)
    return (np.clip(samples, -1.0, 32767 / 32768) * 32768.0).round().astype("<i2").tobytes()


def _reply(**fields) -> str:
    return json.dumps({"status": "ok", **fields}, ensure_ascii=False)


def server_ready() -> str:
    return _reply(type="server_ready")


def speech_end() -> str:
    return _reply(type="speech_end")


def failed(message: str) -> str:
    return json.dumps({"status": "failed", "message": message}, ensure_ascii=False)


def result_message(result: Result, nbest: int, segment_times: bool = False) -> str:
    """partial_result / final_result reply; word pieces only in final results (as Wenet), and the
    utterance's ``segment`` when ``segment_times`` (see the module docstring)."""
    paths = []
    for hyp in result.hyps[:nbest]:
        path: dict = {"sentence": hyp.text}
        if result.is_final:
            path["word_pieces"] = [
                {"word": w.word, "start": round(w.start * 1000), "end": round(w.end * 1000)} for w in hyp.words
            ]
        paths.append(path)
    kind = "final_result" if result.is_final else "partial_result"
    extra = {}
    if segment_times and result.is_final and result.span is not None:
        start, end = result.span
        extra["segment"] = {"index": result.segment, "start": round(start * 1000), "end": round(end * 1000)}
    return _reply(type=kind, nbest=json.dumps(paths, ensure_ascii=False), **extra)
