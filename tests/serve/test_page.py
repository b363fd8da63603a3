"""The microphone page: served by the WebSocket server, and driven in a real (Debian) Chromium.

The first tests need no browser: the static route, the declared sample rate. The
browser tests play a WAV file into the page as its microphone (tests/serve/browser.py)
and skip with a reason when chromium or playwright is missing (CI is pip-only).
"""

import asyncio
import json
import time
import urllib.error
import urllib.request
import warnings
from dataclasses import dataclass

import numpy as np
import pytest
import soundfile as sf
import torch

from asr.data.audio import resample_int16
from asr.data.features import SAMPLE_RATE
from asr.decode.options import DecodeOptions
from asr.serve.client import stream_audio
from asr.decode.endpoint import EndpointConfig, EndpointRule
from asr.serve.multi_stream import MultiStreamRecognizer
from asr.serve.server import AsrServer, ServerConfig
from tests.serve.browser import needs_browser, running, speak_into_page, stop_server
from tests.serve.helpers import fitted_model, noise

torch.set_num_threads(1)
C, LEFT = 4, 2


class RecordingServer(AsrServer):
    """The server, keeping every PCM frame it was sent (to compare with what the page captured)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.received: list[bytes] = []

    def _on_audio(self, session, data: bytes) -> None:
        self.received.append(bytes(data))
        super()._on_audio(session, data)

    def received_audio(self) -> np.ndarray:
        return np.frombuffer(b"".join(self.received), dtype="<i2").astype(np.float64) / 32768.0

    def received_samples(self) -> int:
        return sum(len(frame) for frame in list(self.received)) // 2


def make_server(model, tokenizer, web=True, endpoint=None) -> RecordingServer:
    rec = MultiStreamRecognizer(model, tokenizer, DecodeOptions(chunk_size=C, left_chunks=LEFT, beam=3),
                                endpoint=endpoint or EndpointConfig(enabled=False))
    return RecordingServer(rec, ServerConfig(port=0, web=web))


def http_get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            return reply.status, reply.headers["Content-Type"], reply.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read()


def test_web_serves_the_page_and_websockets_on_one_port(model, tokenizer):
    with running(make_server(model, tokenizer)) as server:
        base = f"http://127.0.0.1:{server.port}"
        status, kind, body = http_get(base + "/")
        assert status == 200 and kind.startswith("text/html") and b"<title>" in body
        for script in ("app.js", "capture-worklet.js", "resampler.js"):
            status, kind, _ = http_get(f"{base}/{script}")
            assert status == 200 and kind.startswith("text/javascript"), script
        status, _, body = http_get(base + "/config.json")
        assert status == 200 and json.loads(body) == {"sample_rate": SAMPLE_RATE, "protocol": "wenet"}
        status, _, body = http_get(base + "/../pyproject.toml")
        assert status == 404
        session = asyncio.run(stream_audio(f"ws://127.0.0.1:{server.port}", noise(1.0, 0, SAMPLE_RATE).numpy(),
                                           SAMPLE_RATE, realtime=False))
        assert session.finals and session.close_code == 1000


def test_without_web_plain_http_is_refused(model, tokenizer):
    with running(make_server(model, tokenizer, web=False)) as server:
        status, _, _ = http_get(f"http://127.0.0.1:{server.port}/")
        assert status == 426  # websockets' "Upgrade Required": no page unless --web


@pytest.mark.parametrize("declared, refused", [(48000, True), (SAMPLE_RATE, False), (None, False)])
def test_a_declared_sample_rate_other_than_the_models_is_refused(model, tokenizer, declared, refused):
    with running(make_server(model, tokenizer)) as server:
        query = "" if declared is None else f"/?sample_rate={declared}"
        session = asyncio.run(stream_audio(f"ws://127.0.0.1:{server.port}{query}",
                                           noise(0.5, 0, SAMPLE_RATE).numpy(), SAMPLE_RATE, realtime=False))
    if refused:
        assert session.close_code == 1008 and not session.finals
        assert "sample_rate 48000" in session.replies[0].message and f"{SAMPLE_RATE} Hz" in session.replies[0].message
    else:
        assert session.close_code == 1000 and session.finals


# ---- in the browser ------------------------------------------------------------------------


def reference_resample(x: np.ndarray, fin: int, fout: int, zero_crossings=32, rolloff=0.95, beta=8.6) -> np.ndarray:
    """float64 oracle of resampler.js: y[n] = sum_k x[k] h(p - k), p = n fin / fout, taps normalised per output."""
    a = rolloff * min(fin, fout) / fin
    half = zero_crossings / a
    k_side = int(np.ceil(half))
    out = np.zeros(int(np.ceil(len(x) * fout / fin)))
    for n in range(out.size):
        p = n * fin / fout
        k = np.arange(int(np.floor(p)) - k_side + 1, int(np.floor(p)) + k_side + 1)
        d = p - k
        r = d / half
        h = np.where(np.abs(r) < 1, a * np.sinc(a * d) * np.i0(beta * np.sqrt(np.clip(1 - r**2, 0, None))) / np.i0(beta),
                     0.0)
        h /= h.sum()
        inside = (k >= 0) & (k < len(x))
        out[n] = x[k[inside]] @ h[inside]
    return out


RESAMPLE_JS = """async ([samples, fin, fout, block]) => {
  const { Resampler } = await import('/resampler.js');
  const r = new Resampler(fin, fout);
  const x = Float32Array.from(samples);
  const out = [];
  for (let i = 0; i < x.length; i += block) out.push(...r.process(x.subarray(i, i + block)));
  out.push(...r.flush());
  return out;
}"""


@needs_browser
def test_page_resampler_matches_float64_reference_and_rejects_aliases(model, tokenizer, tmp_path):
    from tests.serve.browser import browser, open_page

    rng = np.random.default_rng(0)
    wav = tmp_path / "silence.wav"
    sf.write(wav, np.zeros(1600, dtype=np.int16), SAMPLE_RATE)
    with running(make_server(model, tokenizer)) as server, browser(wav) as instance:
        page, _ = open_page(instance, f"http://127.0.0.1:{server.port}/")
        for fin, fout, block in [(48000, 16000, 128), (44100, 16000, 128), (8000, 16000, 100), (22050, 16000, 333)]:
            x = rng.uniform(-0.5, 0.5, 3000).astype(np.float32)
            got = np.array(page.evaluate(RESAMPLE_JS, [x.tolist(), fin, fout, block]))
            want = reference_resample(x.astype(np.float64), fin, fout)
            assert got.shape == want.shape, (fin, fout)
            np.testing.assert_allclose(got, want, atol=2e-6, err_msg=f"{fin} -> {fout}")
        # 48 kHz -> 16 kHz: 1 kHz passes untouched, 9 kHz (would fold onto 7 kHz) is gone
        t = np.arange(48000) / 48000
        for freq, low_db, high_db in [(1000, -0.01, 0.01), (9000, -200.0, -80.0)]:
            y = np.array(page.evaluate(RESAMPLE_JS, [np.sin(2 * np.pi * freq * t).tolist(), 48000, 16000, 128]))
            level_db = 20 * np.log10(np.sqrt(2 * np.mean(y[2000:-2000] ** 2)) + 1e-20)
            assert low_db <= level_db <= high_db, (freq, level_db)


def speech_wav(path, seconds_between: float = 1.2) -> np.ndarray:
    """Two eSpeak phrases with a quiet pause between them, as a 16 kHz WAV; returns the float samples."""
    from asr.synth.espeak import EspeakSynthesizer

    synth = EspeakSynthesizer()
    phrases = [resample_int16(synth.synthesize(text, "en-us", 160, 50, seed=1), synth.sample_rate, SAMPLE_RATE)
               for text in ("the weather in lisbon this weekend", "three recipes in the tin")]
    pause = (np.random.default_rng(0).standard_normal(int(seconds_between * SAMPLE_RATE)) * 3).astype(np.int16)
    audio = np.concatenate([phrases[0], pause, phrases[1]])
    sf.write(path, audio, SAMPLE_RATE, subtype="PCM_16")
    return audio.astype(np.float64) / 32768.0


def lag_of(sent: np.ndarray, got: np.ndarray) -> int:
    """Integer lag (samples) of ``got`` behind ``sent`` at the cross-correlation peak."""
    n = 1 << (len(sent) + len(got)).bit_length()
    corr = np.fft.irfft(np.fft.rfft(got, n) * np.conj(np.fft.rfft(sent, n)), n)
    lag = int(np.argmax(np.abs(corr)))
    return lag if lag < n // 2 else lag - n


FIT_TAPS = 33  # the capture check's linear filter (odd: centred on the sample it predicts)


def linear_fit_error(piece: np.ndarray, got: np.ndarray, at: int, taps: int = FIT_TAPS) -> float:
    """Mean squared error of ``got`` (from ``at + taps // 2``) against the best ``taps``-tap linear
    filter of ``piece``.

    A filter, not just a lag and gain: capture starts at a fraction of a 16 kHz sample (the
    browser runs at 44.1 or 48 kHz), and the band edge above 7 kHz differs; what is left
    after any such filter is what the capture path added. ``piece`` is a stretch of the file
    with ``taps // 2`` samples of context each side (not scored); ``got`` is all that arrived
    and ``at`` where the piece's first sample is in it.
    """
    half = taps // 2
    idx = np.arange(half, len(piece) - half)
    design = np.stack([piece[idx + k] for k in range(-half, half + 1)], axis=1)  # (N, taps)
    target = got[at + idx]
    weights, *_ = np.linalg.lstsq(design, target, rcond=None)
    residual = target - design @ weights
    return float(residual @ residual) / len(idx)


@dataclass(frozen=True)
class CaptureWindow:
    start_s: float  # where the window starts in the file
    lag: int  # samples ``got`` is behind the file here
    snr_db: float  # the file's mean power over linear_fit_error at that lag, in dB


def capture_windows(sent: np.ndarray, got: np.ndarray, window_s: float = 0.25, skip_s: float = 0.5,
                    search_s: float = 0.05, quiet_db: float = -40.0) -> list[CaptureWindow]:
    """Each speech window of the file found in what arrived: its own lag and fit.

    One lag for the whole file would turn a single lost or repeated capture buffer into a
    failed fit of everything after it; window by window, such a glitch is a step in the
    lags, and every window must still fit. A window's SNR is the file's level over the fit's
    error, not the window's own level: a quiet window is held to the same error as a loud
    one. The lag of each window is searched within ``search_s`` of the whole file's. Windows
    quieter than ``quiet_db`` below the file's RMS (the pause) and the first and last ``skip_s``
    (Chromium's fake device ramps the file in and out) are left out.
    """
    whole_lag = lag_of(sent, got)
    size, search, half = int(window_s * SAMPLE_RATE), int(search_s * SAMPLE_RATE), FIT_TAPS // 2
    level = np.sqrt(np.mean(sent**2))
    out = []
    for start in range(int(skip_s * SAMPLE_RATE), len(sent) - int(skip_s * SAMPLE_RATE) - size, size):
        piece = sent[start - half:start + size + half]
        if np.sqrt(np.mean(piece**2)) < level * 10 ** (quiet_db / 20):
            continue
        # normalized correlation at each candidate lag in whole_lag +- search (where the piece fits in got;
        # normalized, or a louder stretch next to a quiet window would win)
        lags = np.arange(whole_lag - search, whole_lag + search + 1)
        lags = lags[(start - half + lags >= 0) & (start + size + half + lags <= len(got))]
        stretches = [got[start - half + k:start + size + half + k] for k in lags]
        corr = [abs(piece @ g) / max(np.linalg.norm(g), 1e-12) for g in stretches]
        lag = int(lags[int(np.argmax(corr))])
        error = linear_fit_error(piece, got, start - half + lag)
        out.append(CaptureWindow(start / SAMPLE_RATE, lag, float(10 * np.log10(level**2 / max(error, 1e-20)))))
    return out


def assert_captured(sent: np.ndarray, got: np.ndarray) -> int | None:
    """Asserts that ``got`` is the file ``sent`` back through a capture path; returns the lag step
    (samples) where it tolerated one, else None."""
    windows = capture_windows(sent, got)
    seen = "; ".join(f"{w.start_s:.2f} s: lag {w.lag}, {w.snr_db:.1f} dB" for w in windows)
    assert len(windows) >= 8, seen
    assert all(abs(w.lag) < 0.3 * SAMPLE_RATE for w in windows), seen
    # The lag may step once, by a few 10 ms capture buffers. On a busy 2-core machine this test failed
    # 2 times in 49 runs with one lag for the whole file: 3.1 dB at the usual lag, as if half the file were
    # a 10 ms buffer off. The page's worklet and socket pass every sample they get (asr/serve/web), so a
    # buffer lost or repeated before them (Chromium's fake capture device, starved) is tolerated once;
    # the window it falls in is excused, every other window must fit. More steps, or a larger one, is
    # audio lost on the way.
    steps = [i for i in range(1, len(windows)) if abs(windows[i].lag - windows[i - 1].lag) > 2]
    sizes = [windows[i].lag - windows[i - 1].lag for i in steps]
    assert len(steps) <= 1 and all(abs(s) <= 0.05 * SAMPLE_RATE for s in sizes), f"lag steps {sizes}: {seen}"
    excused = {steps[0] - 1, steps[0]} if steps else set()
    assert all(w.snr_db > 35.0 for i, w in enumerate(windows) if i not in excused), f"captured audio: {seen}"
    assert sum(windows[i].snr_db <= 35.0 for i in excused) <= 1, seen
    assert len(got) >= len(sent) + windows[-1].lag  # nothing of the file's end lost
    return sizes[0] if sizes else None


def _bursts(seconds: float = 4.0) -> np.ndarray:
    """Two bursts of band-limited noise with a quiet pause between them: speech-like for the capture check."""
    rng = np.random.default_rng(3)
    n = int(seconds * SAMPLE_RATE)
    x = np.convolve(rng.standard_normal(n), np.hanning(9) / 9, mode="same") * 0.3
    x[int(0.45 * n):int(0.6 * n)] *= 1e-3
    return np.round(x * 32768) / 32768


def _through_48k(sent: np.ndarray, delay: int = 300) -> np.ndarray:
    """The page's path in numbers: up to 48 kHz and back to 16 kHz 16-bit, behind a delay."""
    up = resample_int16(np.round(sent * 32768).astype(np.int16), SAMPLE_RATE, 48000)
    back = resample_int16(up, 48000, SAMPLE_RATE).astype(np.float64) / 32768
    return np.concatenate([np.zeros(delay), back])


def test_capture_check_passes_a_resampled_file_and_one_lost_buffer():
    sent = _bursts()
    got = _through_48k(sent)
    assert assert_captured(sent, got) is None
    lost_one = np.concatenate([got[:20000], got[20160:]])
    assert assert_captured(sent, lost_one) == -160
    repeated_one = np.concatenate([got[:50000], got[49840:]])
    assert assert_captured(sent, repeated_one) == 160


@pytest.mark.parametrize("damage", ["two lost buffers", "noise", "a lost end", "a large gap"])
def test_capture_check_fails_audio_damaged_on_the_way(damage):
    sent = _bursts()
    got = _through_48k(sent)
    if damage == "two lost buffers":
        got = np.concatenate([got[:20000], got[20160:45000], got[45160:]])
    elif damage == "noise":
        got = got + np.random.default_rng(0).standard_normal(len(got)) * 0.3 * 10 ** (-30 / 20)
    elif damage == "a lost end":
        got = got[:len(got) - 8000]
    else:
        got = np.concatenate([got[:20000], got[24000:]])
    with pytest.raises(AssertionError):
        assert_captured(sent, got)


CAPTURE_RUNS = 3  # browser runs the capture check may take (see the test below)


@needs_browser
def test_page_streams_the_microphone_and_shows_what_the_server_said(tokenizer, tmp_path):
    """Through Chromium's capture at its own rate and the page's resampler, the server gets the file back
    (> 35 dB from the file up to a short linear filter: browser processing is off by default); the page shows every final the server sent,
    with its word times, and an endpoint divider after each final before the end.

    Two things of a loaded machine are not the page's: Chromium's fake capture device runs behind the wall
    clock (so the test presses Stop once the server holds the whole file and 0.5 s more, more than any lag
    the check allows, instead of after a fixed sleep), and that device, starved, loses or repeats buffers
    before the page sees them, which the capture check cannot tell from the page losing them. So the
    measurement, and only it, may be taken again, up to CAPTURE_RUNS browser runs; the check itself is as
    strict on each run, a page that loses audio fails every run, and every other assertion holds on the run
    that passed.
    """
    wav = tmp_path / "speech.wav"
    sent = speech_wav(wav)
    # forced endpoints every second of stream, so a short file has several finals in continuous decoding
    endpoint = EndpointConfig(rules=(EndpointRule(must_contain_speech=False, min_trailing_silence_s=0.0,
                                                  min_utterance_s=1.0),))
    model, enough, failures = fitted_model(tokenizer), len(sent) + SAMPLE_RATE // 2, []
    for _ in range(CAPTURE_RUNS):
        server = make_server(model, tokenizer, endpoint=endpoint)
        with running(server):
            shown = speak_into_page(wav, f"http://127.0.0.1:{server.port}/", len(sent) / SAMPLE_RATE, screenshot=True,
                                    until=lambda: server.received_samples() >= enough)
        try:
            step = assert_captured(sent, server.received_audio())
            break
        except AssertionError as err:
            failures.append(str(err).splitlines()[0][:300])
    else:
        raise AssertionError(f"the capture check failed in all {CAPTURE_RUNS} browser runs: " + " || ".join(failures))
    if failures:
        warnings.warn(f"the capture check passed on browser run {len(failures) + 1}; before: " + " || ".join(failures))
    (tmp_path / "page.png").write_bytes(shown.screenshot)
    assert shown.status_state == "done", shown.status_text
    assert "-> 16000 Hz" in shown.capture_info and "auto gain off" in shown.capture_info
    if step is not None:
        warnings.warn(f"the captured audio stepped by {step} samples once (a lost or repeated capture buffer)")

    replies = [json.loads(f) for f in shown.frames]
    assert replies[0]["type"] == "server_ready" and replies[-1]["type"] == "speech_end"
    assert any(r["type"] == "partial_result" for r in replies)
    finals = [json.loads(r["nbest"])[0] for r in replies if r["type"] == "final_result"]
    with_text = [f for f in finals if f["sentence"]]
    assert len(with_text) >= 2
    assert shown.finals == [f["sentence"] for f in with_text]
    assert shown.word_times == [(w["word"], w["start"], w["end"]) for f in with_text for w in f["word_pieces"]]
    # every final with text but the one the end signal produced came at an endpoint
    assert shown.breaks == len(with_text) - (1 if finals[-1]["sentence"] else 0)


@needs_browser
def test_page_shows_the_servers_refusal_of_its_rate(model, tokenizer, tmp_path):
    wav = tmp_path / "speech.wav"
    sent = speech_wav(wav)
    with running(make_server(model, tokenizer)) as server:
        shown = speak_into_page(wav, f"http://127.0.0.1:{server.port}/?rate=48000", len(sent) / SAMPLE_RATE)
    assert shown.status_state == "error"
    assert "sample_rate 48000" in shown.status_text and "16000 Hz" in shown.status_text
    assert not server.received


@needs_browser
def test_page_says_when_the_server_goes_away_mid_utterance(model, tokenizer, tmp_path):
    from tests.serve.browser import STATE_JS, browser, open_page, read_page

    wav = tmp_path / "speech.wav"
    speech_wav(wav)
    server = make_server(model, tokenizer)
    with running(server), browser(wav) as instance:
        page, frames = open_page(instance, f"http://127.0.0.1:{server.port}/")
        page.click("#start")
        page.wait_for_function(f"{STATE_JS} === 'listening'", timeout=60000)
        page.wait_for_timeout(1000)
        stop_server(server, server._server.get_loop())
        page.wait_for_function(f"{STATE_JS} === 'error'", timeout=30000)
        shown = read_page(page, frames)
    assert "Connection to the server lost" in shown.status_text


@needs_browser
def test_a_page_closed_mid_utterance_leaves_the_server_serving(model, tokenizer, tmp_path):
    from tests.serve.browser import STATE_JS, browser, open_page

    wav = tmp_path / "speech.wav"
    sent = speech_wav(wav)
    server = make_server(model, tokenizer)
    with running(server):
        with browser(wav) as instance:
            page, _ = open_page(instance, f"http://127.0.0.1:{server.port}/")
            page.click("#start")
            page.wait_for_function(f"{STATE_JS} === 'listening'", timeout=60000)
            page.wait_for_timeout(1000)
            page.close()
        for _ in range(200):  # the server notices the dropped connection and removes its stream (bounded wait)
            if not server.recognizer.streams:
                break
            time.sleep(0.05)
        assert server.received and not server.recognizer.streams
        session = asyncio.run(stream_audio(f"ws://127.0.0.1:{server.port}", sent[:SAMPLE_RATE], SAMPLE_RATE,
                                           realtime=False))
    assert session.finals and session.close_code == 1000
