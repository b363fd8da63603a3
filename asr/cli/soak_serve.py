"""Soak test of the WebSocket server: 32 real-time streams for minutes, a new hotword list at every connection.

Each of --streams clients streams one utterance in real time (100 ms pieces), reads its final, closes and
connects again with the next utterance and another hotword list (--pairs distinct lists of
--hotwords-per-list phrases, drawn from --hotword-pool or from the words of the --cuts transcripts), until
--seconds have passed. The server runs in this process with scripts/serve.py's decoding thread, endpointing
and VAD off, so each connection's final must equal the offline streaming recognizer's with the same list.
Reported: connections and audio served, finals equal to offline decoding, the resident memory sampled every
--sample-every-s (its range after --warmup-s and the slope of a line fitted to it), and the server's
counters after the last connection closed (open connections, sessions, streams, batch-size entries, cached
lists). Bounded: no connection starts after --seconds; the server stops at the end.

Usage:
    python scripts/soak_serve.py --checkpoint exp/quickstart_rel_xl/checkpoints/avg3.ckpt \\
        --cuts data/synth/cuts_test.jsonl.gz --streams 32 --seconds 300 --warmup-s 90
    python scripts/soak_serve.py --checkpoint CKPT --streams 8 --seconds 60 --warmup-s 20 \\
        --hotword-pool names.txt a.wav b.wav
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

# Small per-chunk kernels: passive OpenMP waits, as scripts/serve.py. Set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from asr.decode.options import (add_checkpoint_argument, add_chunk_arguments, add_search_arguments,
                                    add_threads_argument, options_from_args)

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
    )
    parser.add_argument("audio", nargs="*", help="test audio files (or use --cuts)")
    add_checkpoint_argument(parser)
    parser.add_argument("--cuts", help="Lhotse manifest to take test utterances (and hotword words) from")
    parser.add_argument("--utterances", type=int, default=32, help="utterances taken from --cuts (default 32)")
    parser.add_argument("--streams", type=int, default=32, help="clients streaming at once (default 32)")
    parser.add_argument("--seconds", type=float, default=180.0,
                        help="no connection starts after this many seconds (default 180)")
    parser.add_argument("--warmup-s", type=float, default=60.0,
                        help="memory sampled before this is not judged (default 60)")
    parser.add_argument("--sample-every-s", type=float, default=2.0, help="memory sampling period (default 2)")
    parser.add_argument("--pairs", type=int, default=48,
                        help="distinct (utterance, hotword list) pairs the connections cycle through (default 48)")
    parser.add_argument("--hotwords-per-list", type=int, default=20, help="phrases in each list (default 20)")
    parser.add_argument("--hotword-pool", help="phrases to draw the lists from, one a line (default: the words "
                                               "of the --cuts transcripts)")
    add_chunk_arguments(parser)
    add_search_arguments(parser, rescoring=False)
    add_threads_argument(parser, default=1)
    args = parser.parse_args(argv)
    if not args.audio and not args.cuts:
        parser.error("give audio files or --cuts")
    if not args.hotword_pool and not args.cuts:
        parser.error("--hotword-pool is needed without --cuts (whose transcripts give the words otherwise)")
    if args.streams < 1 or args.pairs < 1 or args.hotwords_per_list < 0 or args.utterances < 1:
        parser.error("--streams, --pairs and --utterances must be >= 1, --hotwords-per-list >= 0")
    if not 0 < args.warmup_s < args.seconds or args.sample_every_s <= 0:
        parser.error(f"need 0 < --warmup-s ({args.warmup_s}) < --seconds ({args.seconds}) and --sample-every-s > 0")
    if args.chunk_size <= 0:
        parser.error(f"--chunk-size ({args.chunk_size}) must be > 0: the server streams")
    args.options = options_from_args(args, parser)
    return args


def hotword_pool(args) -> list[str]:
    """The phrases lists are drawn from: --hotword-pool's, or the distinct words of the --cuts transcripts."""
    if args.hotword_pool:
        from asr.decode.hotwords import read_hotwords

        return [text for text, _ in read_hotwords(args.hotword_pool)]
    from asr.data.manifest import read_cuts

    words = {word for cut in read_cuts(args.cuts) for sup in cut.supervisions for word in (sup.text or "").split()}
    return sorted(words)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from asr.bench.soak import SoakConfig, draw_lists, make_pairs, soak
    from asr.cli.bench_serve import load_waves
    from asr.data.features import SAMPLE_RATE, FeatureConfig
    from asr.decode.endpoint import EndpointConfig
    from asr.serve.multi_stream import MultiStreamRecognizer
    from asr.train.checkpoint import load_model

    torch.set_num_threads(args.threads)
    try:
        config = SoakConfig(streams=args.streams, seconds=args.seconds, warmup_s=args.warmup_s,
                            sample_every_s=args.sample_every_s)
        model, tokenizer, cfg = load_model(args.checkpoint)
        waves = load_waves(args)
        lists = draw_lists(hotword_pool(args), args.pairs, args.hotwords_per_list)
    except (OSError, ValueError) as err:
        print(f"error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    features = FeatureConfig.from_dict(cfg.features)
    print(f"{len(waves)} utterances ({sum(w.numel() for w in waves) / SAMPLE_RATE:.1f} s), {len(lists)} lists of "
          f"{args.hotwords_per_list} phrases; offline pass ...", flush=True)
    pairs = make_pairs(model, tokenizer, args.options, waves, lists, features=features)
    recognizer = MultiStreamRecognizer(model, tokenizer, args.options, endpoint=EndpointConfig(enabled=False),
                                       features=features, max_batch=max(args.streams, 1))
    print(f"soak: {args.streams} real-time streams for {args.seconds:g} s (warm-up {args.warmup_s:g} s) ...",
          flush=True)
    report = asyncio.run(soak(recognizer, pairs, config))
    print("\n".join(report.lines()))
    return 0 if report.finals_equal == report.connections and not report.failed else 1


if __name__ == "__main__":
    sys.exit(main())
