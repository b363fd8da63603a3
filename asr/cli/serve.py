"""WebSocket speech recognition server speaking Wenet's runtime protocol.

Many concurrent streams share one model: every stream that has a whole chunk of
audio is encoded in one batched step. Endpointing is on (no speech for 5 s,
1 s of silence after speech, 20 s utterances); clients ask for continuous
decoding with {"signal": "start", "continuous_decoding": true}. Existing Wenet
clients work unchanged; see scripts/client.py.

Usage:
    python scripts/serve.py --checkpoint exp/run/checkpoints/last.ckpt
    python scripts/serve.py --checkpoint last.ckpt --port 10086 --max-connections 32 --chunk-size 16
    python scripts/serve.py --checkpoint last.ckpt --host 0.0.0.0   # reachable from other machines
    python scripts/serve.py --checkpoint last.ckpt --backend onnx --onnx-model export/encoder_step.onnx
    python scripts/serve.py --checkpoint last.ckpt --lm data/synth/lm/4gram.arpa.gz   # + the token LM
    python scripts/serve.py --checkpoint last.ckpt --hotwords names.txt   # every connection biased towards them
    python scripts/serve.py --checkpoint last.ckpt --web   # + the microphone page at http://127.0.0.1:10086/
    python scripts/serve.py --checkpoint last.ckpt --vad silero --endpoint-reset both   # live microphones

Clients add their own hotwords in the start message ({"signal": "start", "hotwords": ["anna",
"new york:3"]}); they are merged with --hotwords for that connection only. A list over
--max-hotwords phrases or with a phrase over --max-hotword-chars characters gets
{"status": "failed"} naming the limit. A connection's own list is compiled in a worker thread (one
list at a time, other connections go on meanwhile); one not compiled within --hotword-compile-s
seconds of its start message gets {"status": "failed"}.

Hostile or lost clients: a connection that sends nothing for --idle-timeout-s seconds (no start
signal, or no audio and no end signal after it) gets {"status": "failed"} naming the limit and
is closed; one client address may hold --max-connections-per-client connections (behind a reverse
proxy every client has the proxy's address: raise it to --max-connections there).

--web serves a page (asr/serve/web: HTML and JavaScript in the package, nothing
from elsewhere) on the same port: open http://127.0.0.1:10086/ in a browser, press
Start, speak. It captures the microphone with an AudioWorklet, resamples to 16 kHz,
and speaks the same protocol as any other client. A page from another web origin may not open a
WebSocket here (HTTP 403): a site the user visits cannot stream to the server; --allow-origin names
pages that may (a page of your own served elsewhere, a reverse proxy's https address). Clients that
send no Origin header (Wenet's, scripts/client.py) are not browsers and always connect.

--vad silero puts Silero VAD (its ONNX model from the silero-vad wheel) in front of every
stream: non-speech never reaches the encoder (a silent connection costs almost nothing), and
the end of each speech segment (--vad-min-silence of non-speech) is an endpoint.
--endpoint-reset says what restarts at an endpoint besides the decoder: the encoder's cache,
the online CMN's running mean, both, or none (they carry over); --endpoint-silence is the
silence after speech that ends an utterance.

Talk behind the speaker (a television, colleagues) keeps the VAD open. Audio --endpoint-speaker-margin
dB under the speaker's level and near the background's floor is then the background: it ends an
utterance like silence (--endpoint-absence of it ends a pause as the VAD would), its words are
neither decoded nor kept (--endpoint-suppress-background; the search judges a frame by the audio up to
--endpoint-search-ahead after it too, against the speaker's level over the same window:
--endpoint-search-speaker), and before the speaker's next word it leaves the encoder's caches
(--endpoint-forget-background).

--backend onnx runs the encoder's whole chunks through a step written by
scripts/export.py (same --chunk-size and --left-chunks; checked), one stream at a
time; the last partial chunk of a stream, CTC and rescoring stay eager.

Binds to 127.0.0.1 unless --host says otherwise. Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

# Small per-chunk kernels: passive OpenMP waits (see scripts/stream.py). Set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

from asr.decode.hotwords import (DEFAULT_MAX_PHRASE_CHARS, DEFAULT_MAX_PHRASES, add_hotword_arguments,  # noqa: E402
                                 read_hotwords)
from asr.decode.endpoint import DEFAULT_TRAILING_SILENCE_S, ENDPOINT_RESETS, EndpointConfig  # noqa: E402
from asr.decode.options import (add_checkpoint_argument, add_chunk_arguments, add_search_arguments,  # noqa: E402
                                add_threads_argument, options_from_args)
from asr.lm import add_lm_arguments, fusion_from_args  # noqa: E402
from asr.serve.origin import OriginPolicy  # noqa: E402
from asr.streaming.vad import add_vad_arguments, vad_from_args  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
    )
    add_checkpoint_argument(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=10086, help="TCP port (default 10086, as Wenet)")
    parser.add_argument("--max-connections", type=int, default=32, help="connections served at once (default 32)")
    parser.add_argument("--max-connections-per-client", type=int, default=8,
                        help="connections one client address may hold at once (default 8)")
    parser.add_argument("--idle-timeout-s", type=float, default=20.0,
                        help="close a connection that sends nothing for this long while the server waits for it "
                             "(default 20)")
    parser.add_argument("--max-frame-kb", type=int, default=1024, help="largest WebSocket frame in KiB (default 1024)")
    parser.add_argument("--max-backlog-s", type=float, default=10.0,
                        help="seconds of undecoded audio a connection may queue (default 10)")
    add_chunk_arguments(parser)
    add_search_arguments(parser)
    add_lm_arguments(parser)
    add_hotword_arguments(parser)
    parser.add_argument("--max-hotwords", type=int, default=DEFAULT_MAX_PHRASES,
                        help=f"phrases a client may send in its start message (default {DEFAULT_MAX_PHRASES})")
    parser.add_argument("--max-hotword-chars", type=int, default=DEFAULT_MAX_PHRASE_CHARS,
                        help=f"characters in one of them (default {DEFAULT_MAX_PHRASE_CHARS})")
    parser.add_argument("--hotword-compile-s", type=float, default=10.0,
                        help="seconds a client's own list may take to compile, its wait for the worker included "
                             "(default 10)")
    parser.add_argument("--web", action="store_true",
                        help="also serve the microphone page over HTTP on the same port (http://HOST:PORT/)")
    parser.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                        help="a web origin (scheme://host[:port]) whose pages may connect besides the server's own "
                             "page; repeat for more, '*' for any. Clients that send no Origin (Wenet's, scripts) "
                             "always may")
    parser.add_argument("--no-endpoint", action="store_true", help="never end an utterance before the client does")
    parser.add_argument("--endpoint-silence", type=float, default=DEFAULT_TRAILING_SILENCE_S, metavar="S",
                        help=f"seconds of silence after speech that end an utterance (default "
                             f"{DEFAULT_TRAILING_SILENCE_S:g}, Wenet's)")
    # Live sessions (bench_live.py: lead-ins, pauses and room tone around test sentences) read about
    # as well as the same sentences alone with a VAD and both resets, far worse without
    # (data/results/live.md): a microphone's silence never reaches the encoder, and what an utterance
    # heard does not colour the next one.
    parser.add_argument("--endpoint-reset", choices=ENDPOINT_RESETS, default="both",
                        help="what restarts at an endpoint besides the decoder: the encoder's attention and conv "
                             "caches, the online CMN's running mean, both, or none (default both)")
    endpoint = EndpointConfig()
    parser.add_argument("--endpoint-speaker-margin", type=float, default=endpoint.speaker_margin_db, metavar="DB",
                        help=f"audio this many dB under the speaker's level is not the speaker: it ends an utterance "
                             f"like silence, whatever the recognizer hears in it (default "
                             f"{endpoint.speaker_margin_db:g}; 0: off)")
    parser.add_argument("--endpoint-speaker-window", type=float, default=endpoint.speaker_window_s, metavar="S",
                        help=f"a frame is under the speaker's level when the loudest audio within half this window "
                             f"either side is, so a word's quiet consonants stay the speaker's (default "
                             f"{endpoint.speaker_window_s:g}; 0: each frame by itself)")
    parser.add_argument("--endpoint-search-ahead", type=float, default=endpoint.search_ahead_s, metavar="S",
                        help=f"the search judges a frame by the loudest audio up to this far ahead of it in its chunk "
                             f"too, so a word emitted before its audio is not blanked (default "
                             f"{endpoint.search_ahead_s:g}, a chunk of 16; a chunk's length or more: its whole rest)")
    parser.add_argument("--endpoint-search-speaker", choices=("window", "frame"),
                        default="window" if endpoint.search_speaker_window else "frame",
                        help="the speaker's level the search weighs that heard audio against: the loudest audio "
                             "around each frame the recognizer emitted on (window, the same measure as the heard "
                             "level) or the emitted frame's own level (frame, as the endpoint rule does)")
    parser.add_argument("--endpoint-suppress-background", action=argparse.BooleanOptionalAction, default=None,
                        help=f"also read audio under the speaker's level and near the background's own floor as "
                             f"silence in the search, and drop from partials and finals a word far under the loudest "
                             f"word of its utterance and near that floor: the background's words are not emitted, "
                             f"a quieter sentence's are (needs --endpoint-speaker-margin > 0; default "
                             f"{'on' if endpoint.suppress_background else 'off'})")
    parser.add_argument("--endpoint-absence", type=float, default=endpoint.absence_s, metavar="S",
                        help=f"this long a run of audio under the speaker's level and near the background's floor ends "
                             f"an utterance, as the VAD's silence does when no one talks behind the speaker (default "
                             f"{endpoint.absence_s:g}; 0: off)")
    parser.add_argument("--endpoint-forget-background", action=argparse.BooleanOptionalAction,
                        default=endpoint.forget_background,
                        help=f"with suppression, restart the encoder after each chunk of background before an "
                             f"utterance's first word, and at the chunk where someone louder than the talk a stream "
                             f"started on begins, so talk before the speaker is not in the attention's left context "
                             f"when they start (default {'on' if endpoint.forget_background else 'off'})")
    add_vad_arguments(parser, default="silero")
    # One thread: a chunk step is hundreds of small ops, where more threads cost more at their barriers than they
    # gain (scripts/bench_streaming.py); the streams' batching is the server's parallelism.
    add_threads_argument(parser, default=1)
    parser.add_argument("--backend", choices=("eager", "onnx"), default="eager",
                        help="encoder chunk step: eager PyTorch, batched over streams, or an ONNX export (default eager)")
    parser.add_argument("--onnx-model", help="encoder_step.onnx written by scripts/export.py (with --backend onnx)")
    args = parser.parse_args(argv)
    if args.chunk_size <= 0:
        parser.error(f"--chunk-size ({args.chunk_size}) must be > 0")
    args.options = options_from_args(args, parser)
    if args.max_connections < 1 or args.max_connections_per_client < 1 or args.threads < 1:
        parser.error("--max-connections, --max-connections-per-client and --threads must be >= 1")
    for flag, value in (("--idle-timeout-s", args.idle_timeout_s), ("--hotword-compile-s", args.hotword_compile_s)):
        if not 0 < value < float("inf"):
            parser.error(f"{flag} ({value}) must be a finite number > 0")
    try:
        OriginPolicy(args.allow_origin)
    except ValueError as err:
        parser.error(f"--allow-origin: {err}")
    if not 0 <= args.endpoint_speaker_margin < float("inf") or not 0 <= args.endpoint_speaker_window < float("inf"):
        parser.error(f"--endpoint-speaker-margin ({args.endpoint_speaker_margin}) and --endpoint-speaker-window "
                     f"({args.endpoint_speaker_window}) must be finite numbers >= 0")
    if not 0 <= args.endpoint_search_ahead < float("inf"):
        parser.error(f"--endpoint-search-ahead ({args.endpoint_search_ahead}) must be a finite number >= 0")
    if not 0 <= args.endpoint_absence < float("inf"):
        parser.error(f"--endpoint-absence ({args.endpoint_absence}) must be a finite number >= 0")
    if args.endpoint_suppress_background and not args.endpoint_speaker_margin:
        parser.error("--endpoint-suppress-background needs --endpoint-speaker-margin > 0 (the speaker's level)")
    if args.endpoint_suppress_background is None:  # the default, and nothing to suppress without a speaker's level
        args.endpoint_suppress_background = endpoint.suppress_background and bool(args.endpoint_speaker_margin)
    if args.backend == "onnx" and not args.onnx_model:
        parser.error("--backend onnx needs --onnx-model PATH (write one with scripts/export.py)")
    if args.backend == "eager" and args.onnx_model:
        parser.error("--onnx-model is only used with --backend onnx")
    return args


def build_server(args: argparse.Namespace):
    from asr.data.features import FeatureConfig
    from asr.decode.endpoint import default_rules
    from asr.serve.multi_stream import MultiStreamRecognizer
    from asr.serve.server import AsrServer, ServerConfig
    from asr.train.checkpoint import load_model

    model, tokenizer, cfg = load_model(args.checkpoint)
    model.eval()
    chunk_encoder = None
    if args.backend == "onnx":
        from asr.serve.encoders import OnnxChunkEncoder
        from asr.serve.export import OnnxEncoderStep

        if not os.path.isfile(args.onnx_model):
            raise ValueError(f"--onnx-model {args.onnx_model} is not a file (write one with scripts/export.py)")
        runner = OnnxEncoderStep(args.onnx_model, threads=args.threads)
        chunk_encoder = OnnxChunkEncoder(runner, model.encoder, args.chunk_size, args.left_chunks)
    recognizer = MultiStreamRecognizer(
        model, tokenizer, args.options,
        endpoint=EndpointConfig(enabled=not args.no_endpoint, rules=default_rules(args.endpoint_silence),
                                reset=args.endpoint_reset, speaker_margin_db=args.endpoint_speaker_margin or None,
                                suppress_background=args.endpoint_suppress_background,
                                forget_background=args.endpoint_forget_background,
                                absence_s=args.endpoint_absence or None,
                                speaker_window_s=args.endpoint_speaker_window,
                                search_ahead_s=args.endpoint_search_ahead,
                                search_speaker_window=args.endpoint_search_speaker == "window"),
        vad=vad_from_args(args), chunk_encoder=chunk_encoder, fusion=fusion_from_args(args, tokenizer),
        features=FeatureConfig.from_dict(cfg.features), hotwords=read_hotwords(args.hotwords) if args.hotwords else (),
    )
    config = ServerConfig(host=args.host, port=args.port, max_connections=args.max_connections,
                          max_frame_bytes=args.max_frame_kb * 1024, max_backlog_s=args.max_backlog_s,
                          max_hotwords=args.max_hotwords, max_hotword_chars=args.max_hotword_chars, web=args.web,
                          max_connections_per_client=args.max_connections_per_client,
                          idle_timeout_s=args.idle_timeout_s, hotword_compile_s=args.hotword_compile_s,
                          allowed_origins=tuple(args.allow_origin))
    return AsrServer(recognizer, config)


class CannotListen(Exception):
    """The server could not bind its address (in use, or not this machine's)."""


async def serve(server, args: argparse.Namespace) -> None:
    try:
        await server.start()
    except OSError as err:
        raise CannotListen(f"cannot serve on {args.host}:{args.port}: {str(err).splitlines()[0]}") from err
    print(f"serving on ws://{args.host}:{server.port} (Ctrl-C stops; {args.backend} backend)", flush=True)
    if args.web:
        print(f"microphone page: http://{args.host}:{server.port}/", flush=True)
    try:
        await server.serve_forever()
    finally:
        await server.stop()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    # What a bad option or input raises while the server is built (a checkpoint that is not a model, a missing
    # --lm or --hotwords file, a list the model cannot spell) and while it binds (an address in use) is one line;
    # anything else, a bug, keeps its traceback.
    try:
        server = build_server(args)
    except (OSError, ValueError) as err:  # FileNotFoundError (a missing --lm) is an OSError
        print(f"error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(server, args))
    except KeyboardInterrupt:
        pass
    except CannotListen as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
