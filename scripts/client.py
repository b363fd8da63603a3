"""Stream audio files to a Wenet-protocol WebSocket server in real time and print the results.

Partial results are printed as they change, then each final result with its
word times (seconds). Works with scripts/serve.py and with Wenet's own server.

Usage:
    python scripts/client.py a.wav b.flac
    python scripts/client.py --uri ws://127.0.0.1:10086 --continuous --nbest 3 long.wav
    python scripts/client.py --fast a.wav        # send as fast as possible, not in real time

Audio may have any sample rate and channel count (resampled to 16 kHz mono, sent as 16-bit PCM).
A file that cannot be read or holds NaN or inf samples, a server that cannot be reached, or a
server that refuses or drops the file prints a one-line error; the exit code is 1 if any file failed.
"""

from __future__ import annotations

import argparse
import sys


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
    )
    parser.add_argument("audio", nargs="+", help="audio files")
    parser.add_argument("--uri", default="ws://127.0.0.1:10086", help="server address (default ws://127.0.0.1:10086)")
    parser.add_argument("--piece-ms", type=float, default=100.0, help="audio per WebSocket frame in ms (default 100)")
    parser.add_argument("--nbest", type=int, default=1, help="hypotheses per result (default 1)")
    parser.add_argument("--continuous", action="store_true", help="keep decoding after an endpoint")
    parser.add_argument("--fast", action="store_true", help="send audio as fast as possible")
    args = parser.parse_args(argv)
    if args.piece_ms <= 0 or args.nbest < 1:
        parser.error("--piece-ms must be > 0 and --nbest >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from asr.serve.client import stream_files

    failed = stream_files(args.audio, args.uri, piece_s=args.piece_ms / 1000, realtime=not args.fast,
                          nbest=args.nbest, continuous_decoding=args.continuous)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
