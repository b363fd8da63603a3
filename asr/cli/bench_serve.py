"""Load test of scripts/serve.py on loopback: N concurrent real-time clients, latency and CPU per N.

Starts the server as a child process on 127.0.0.1 (a free port), then for each N
opens N clients at once, each streaming one test utterance in real time (100 ms
pieces), and reports per N: p50/p95 latency from the piece that completes an
encoder chunk to the next reply, the server's CPU use (its own user+system time
over the wall time, in cores), and whether every final transcript equals the
offline streaming recognizer's (``asr.streaming.StreamingRecognizer``, what
scripts/stream.py runs) with the same chunk, beam and rescoring weights; CPU per stream is the
server's CPU time over the seconds of audio the N clients streamed (the cores one real-time
stream costs; unlike cores over wall time it does not shrink when a loaded machine lets the
server fall behind).
Endpointing is off so the finals are comparable. Bounded: --max-seconds caps
each N's run; the server is stopped at the end.

--backend sherpa-onnx drives sherpa-onnx's C++ WebSocket server (sherpa-onnx-bin) serving a
scripts/export.py --format sherpa-onnx export of the same checkpoint, with the same clients,
audio and pacing (its own protocol: float32 samples, "Done"); its finals are compared with our
streaming recognizer's CTC greedy text (it decodes greedily) on the same audio plus the tail
of zeros the server appends (asr/interop/sherpa_check.py).

Usage:
    python scripts/bench_serve.py --checkpoint CKPT --cuts data/synth/cuts_test.jsonl.gz --clients 1,8,16,32
    python scripts/bench_serve.py --checkpoint CKPT --clients 4 a.wav b.wav
    python scripts/bench_serve.py --checkpoint CKPT --cuts data/synth/cuts_test.jsonl.gz --backend onnx --onnx-model STEP.onnx
    python scripts/bench_serve.py --checkpoint CKPT --cuts data/synth/cuts_test.jsonl.gz --lm data/synth/lm/4gram.arpa.gz
    python scripts/bench_serve.py --checkpoint CKPT --cuts data/synth/cuts_test.jsonl.gz --backend sherpa-onnx --sherpa-export DIR
    python scripts/bench_serve.py --checkpoint CKPT --cuts data/synth/cuts_test.jsonl.gz --clients 32 \
        --hotwords-per-client 100 --hotword-pool data/synth_biasing/biasing/pool.txt

--hotwords-per-client K: every N runs twice, without lists and then with each client sending its
own K phrases (drawn from --hotword-pool, seeded by the client's index) in its start message;
the offline reference decodes each client's utterance with the same list.

--list-flood F: every N runs again while F other connections, one after another each, start with
a list as long as the server allows by default (2000 phrases of 100 characters, letters the model
spells, every list different, so none is a cache hit) and close at its first reply; a line then gives
the reply gap (time between two replies of one real-time client) p95 and max with and without the flood,
and how long the flooding connections waited for server_ready.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path



def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
    )
    from asr.decode.options import (add_checkpoint_argument, add_chunk_arguments, add_search_arguments,
                                    add_threads_argument, options_from_args)
    from asr.lm import add_lm_arguments

    parser.add_argument("audio", nargs="*", help="test audio files (or use --cuts)")
    add_checkpoint_argument(parser)
    parser.add_argument("--cuts", help="Lhotse manifest to take test utterances from")
    parser.add_argument("--utterances", type=int, default=32, help="utterances taken from --cuts (default 32)")
    parser.add_argument("--clients", default="1,8,16,32", help="comma-separated N values (default 1,8,16,32)")
    add_chunk_arguments(parser)
    add_search_arguments(parser, rescoring=False)  # the server and the offline reference rescore at the defaults
    parser.add_argument("--backend", choices=("eager", "onnx", "sherpa-onnx"), default="eager",
                        help="the server's encoder step (scripts/serve.py --backend; default eager), or sherpa-onnx's "
                             "C++ server")
    parser.add_argument("--onnx-model", help="with --backend onnx: the export (same chunk and left chunks)")
    parser.add_argument("--sherpa-export", help="with --backend sherpa-onnx: the folder of model.onnx and tokens.txt "
                                                "(scripts/export.py --format sherpa-onnx; its chunk and left chunks)")
    add_threads_argument(parser, default=1)  # the server's threads: scripts/serve.py's default
    parser.add_argument("--stagger-s", type=float, default=0.0,
                        help="start each client at a seeded random offset in [0, S) s (default 0: all at once)")
    parser.add_argument("--max-seconds", type=float, default=120.0, help="wall-time cap per N (default 120)")
    parser.add_argument("--hotwords-per-client", type=int, default=0,
                        help="also run every N with each client sending this many hotwords (default 0: no lists)")
    parser.add_argument("--hotword-pool", help="phrases to draw the clients' lists from, one a line")
    parser.add_argument("--list-flood", type=int, default=0, metavar="F",
                        help="also run every N beside F connections starting the longest lists (default 0: no)")
    add_lm_arguments(parser)  # passed on to the server; the offline reference fuses the same LM
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.clients.split(",")]
    if not counts or min(counts) < 1:
        parser.error(f"--clients ({args.clients}) must list positive integers")
    if not args.audio and not args.cuts:
        parser.error("give audio files or --cuts")
    if args.stagger_s < 0:
        parser.error(f"--stagger-s ({args.stagger_s}) must be >= 0")
    if (args.backend == "onnx") != bool(args.onnx_model):
        parser.error("--backend onnx and --onnx-model go together")
    if (args.backend == "sherpa-onnx") != bool(args.sherpa_export):
        parser.error("--backend sherpa-onnx and --sherpa-export go together")
    if args.hotwords_per_client < 0 or (args.hotwords_per_client > 0) != bool(args.hotword_pool):
        parser.error("--hotwords-per-client K (> 0) and --hotword-pool FILE go together")
    if args.backend == "sherpa-onnx" and (args.hotwords_per_client or args.list_flood):
        parser.error("--hotwords-per-client and --list-flood need our server: sherpa-onnx's CTC server takes no "
                     "per-connection hotwords")
    if args.list_flood < 0:
        parser.error(f"--list-flood ({args.list_flood}) must be >= 0")
    args.counts = counts
    args.options = options_from_args(args, parser)
    return args


def load_waves(args) -> list:
    from asr.data.audio import load_audio
    from asr.data.features import SAMPLE_RATE

    waves = [load_audio(p, target_sr=SAMPLE_RATE) for p in args.audio]
    if args.cuts:
        from asr.data.audio import cut_waveform
        from asr.data.manifest import read_cuts

        for cut in read_cuts(args.cuts):
            if len(waves) >= args.utterances:
                break
            waves.append(cut_waveform(cut, SAMPLE_RATE))
    return waves


def offline_texts(args, waves, model, tokenizer, features=None, lists=None) -> list[str]:
    """The final text of each wave (with ``lists[i]`` as its hotwords when given)."""
    from asr.lm import fusion_from_args
    from asr.streaming.recognizer import StreamingRecognizer

    fusion = fusion_from_args(args, tokenizer)
    texts = []
    for i, wave in enumerate(waves):
        rec = StreamingRecognizer(model.eval(), tokenizer, args.options, fusion=fusion, features=features,
                                  hotwords=lists[i] if lists else None)
        rec.accept_waveform(wave)
        texts.append(rec.finalize())
    return texts


def start_sherpa(args, waves, model, tokenizer, features):
    """sherpa-onnx's server on the export, its URI and the texts its finals must equal (our streaming
    recognizer's CTC greedy text of each wave plus the server's tail); (None, None, None) if it cannot start."""
    import torch

    from asr.data.features import SAMPLE_RATE
    from asr.interop.sherpa_check import normalize, our_greedy_texts, tail_seconds
    from asr.interop.sherpa_onnx import SherpaRunner
    from asr.interop.sherpa_server import free_port, server_command, start_server

    layout = SherpaRunner(Path(args.sherpa_export) / "model.onnx").layout
    if (layout.chunk_size, layout.left_chunks) != (args.chunk_size, args.left_chunks):
        print(f"error: the export streams chunk {layout.chunk_size}, left {layout.left_chunks}; the bench was asked "
              f"for {args.chunk_size}, {args.left_chunks}", file=sys.stderr)
        return None, None, None
    tail = tail_seconds(layout)
    padded = [torch.cat([w, torch.zeros(int(tail * SAMPLE_RATE))]).numpy() for w in waves]
    reference = [normalize(t) for t in our_greedy_texts(model, tokenizer, features, layout.chunk_size,
                                                         layout.left_chunks, padded)]
    port = free_port()
    try:
        server = start_server(server_command(args.sherpa_export, port, tail, layout.input_dim, args.threads,
                                             max(args.counts)), port)
    except (OSError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return None, None, None
    return server, f"ws://127.0.0.1:{port}", reference


def sherpa_final_text(tokens_txt: Path, tokenizer):
    """session -> the text of sherpa-onnx's final tokens through our tokenizer, normalized as the reference."""
    from asr.interop.sherpa_check import normalize, read_tokens, symbols_to_ids

    table = read_tokens(tokens_txt)

    def final_text(session) -> str:
        finals = session.finals
        return normalize(tokenizer.decode(symbols_to_ids(finals[-1].nbest[0]["tokens"], table))) if finals else ""

    return final_text


def client_lists(pool: list[str], clients: int, size: int) -> list[list[str]]:
    """Client i's hotword list: ``size`` phrases of ``pool`` drawn with seed i."""
    if size > len(pool):
        raise ValueError(f"the pool holds {len(pool)} phrases, {size} per client asked")
    return [random.Random(i).sample(pool, size) for i in range(clients)]


def flood_starts(tokenizer, count: int, seed: int = 0) -> list[str]:
    """``count`` start messages, each with its own list of the longest the server allows by default:
    DEFAULT_MAX_PHRASES phrases of DEFAULT_MAX_PHRASE_CHARS characters in letters the tokenizer spells."""
    import json
    import string

    from asr.decode.hotwords import DEFAULT_MAX_PHRASE_CHARS, DEFAULT_MAX_PHRASES

    letters = [c for c in string.ascii_lowercase if tokenizer.unk_id not in tokenizer.encode(c)]
    rng = random.Random(seed)
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(20000)]

    def phrase() -> str:
        return " ".join(rng.choices(words, k=DEFAULT_MAX_PHRASE_CHARS // 4))[:DEFAULT_MAX_PHRASE_CHARS].strip()

    return [json.dumps({"signal": "start", "hotwords": [phrase() for _ in range(DEFAULT_MAX_PHRASES)]})
            for _ in range(count)]


async def flood(uri: str, starts, done: asyncio.Event) -> list[tuple[str, float]]:
    """Until ``done``: connect, send the next start message of ``starts`` (an iterator shared by the
    flooders), wait for the first reply, close. (status, seconds to it) of every list sent."""
    from websockets.asyncio.client import connect

    from asr.serve.client import Reply

    out = []
    for start in starts:
        if done.is_set():
            break
        async with connect(uri, max_size=None) as ws:
            sent = time.perf_counter()
            await ws.send(start)
            reply = Reply.parse(await ws.recv())
            out.append((reply.status, time.perf_counter() - sent))
    return out


def reply_gaps(session) -> list[float]:
    """Seconds between consecutive partial and final results of one session."""
    arrivals = [r.received_at for r in session.replies if r.type in ("partial_result", "final_result")]
    return [b - a for a, b in zip(arrivals, arrivals[1:])]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)] if ordered else float("nan")


def chunk_end_samples(total: int, chunk_size: int, encoder, features=None) -> list[int]:
    """Sample counts at which each whole encoder chunk (and its lookahead) becomes computable
    (``features``: the model's ``FeatureConfig``, None: LEGACY)."""
    from asr.data.features import samples_for_frames

    ends, k = [], 1
    while True:
        frames = encoder.chunk_window(k * chunk_size)
        samples = samples_for_frames(features, frames)
        if samples > total:
            return ends
        ends.append(samples)
        k += 1


def chunk_latencies(session, wave_len: int, chunk_size: int, encoder, sample_rate: int,
                    features=None) -> list[float]:
    """Per chunk: first reply after the piece completing it was sent, minus that send time."""
    arrivals = sorted(r.received_at for r in session.replies if r.type in ("partial_result", "final_result"))
    out = []
    for end in chunk_end_samples(wave_len, chunk_size, encoder, features):
        sent = next((t for s, t in session.sent_at if s * sample_rate >= end), None)
        reply = next((a for a in arrivals if sent is not None and a >= sent), None)
        if reply is not None:
            out.append(reply - sent)
    return out


def rss_mib(pid: int) -> float:
    """Resident memory of process ``pid`` in MiB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run_clients(uri: str, waves, n: int, args, lists=None, flood_with=None):
    from asr.data.features import SAMPLE_RATE
    from asr.interop.sherpa_server import stream_to_sherpa
    from asr.serve.client import stream_audio

    send = stream_to_sherpa if args.backend == "sherpa-onnx" else stream_audio

    chosen = [waves[i % len(waves)] for i in range(n)]
    # Start offsets: 0 (every client at once, chunk boundaries aligned: the worst case) or
    # spread over --stagger-s as independent users would be; seeded, so a rerun matches.
    rng = random.Random(n)
    offsets = [rng.uniform(0.0, args.stagger_s) for _ in chosen]

    async def client(wave, offset, hotwords):
        await asyncio.sleep(offset)
        # sherpa-onnx's client takes no hotwords; ours sends a list only when the client has one
        extra = {"hotwords": hotwords} if hotwords else {}
        return await send(uri, wave.numpy(), SAMPLE_RATE, piece_s=0.1, realtime=True, **extra)

    tasks = [client(w, o, lists[i] if lists else None) for i, (w, o) in enumerate(zip(chosen, offsets))]
    done = asyncio.Event()
    starts = iter(flood_with or ())
    flooders = [asyncio.create_task(flood(uri, starts, done)) for _ in range(args.list_flood if flood_with else 0)]
    try:
        sessions = await asyncio.wait_for(asyncio.gather(*tasks), timeout=args.max_seconds)
    finally:
        done.set()
    flooded = [x for f in await asyncio.gather(*flooders) for x in f]
    return chosen, sessions, flooded


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from asr.data.features import SAMPLE_RATE

    waves = load_waves(args)
    print(f"{len(waves)} test utterances, {sum(w.numel() for w in waves) / SAMPLE_RATE:.1f} s; offline pass ...",
          flush=True)
    from asr.data.features import FeatureConfig
    from asr.lm import lm_argv
    from asr.train.checkpoint import load_model

    model, tokenizer, cfg = load_model(args.checkpoint)
    features = FeatureConfig.from_dict(cfg.features)
    pool = []
    if args.hotword_pool:
        from asr.decode.hotwords import read_hotwords

        pool = [text for text, _ in read_hotwords(args.hotword_pool)]
    if args.backend == "sherpa-onnx":
        server, uri, reference = start_sherpa(args, waves, model, tokenizer, features)
        final_text = sherpa_final_text(Path(args.sherpa_export) / "tokens.txt", tokenizer)
        if server is None:
            return 2
    else:
        reference = offline_texts(args, waves, model, tokenizer, features)
        final_text = lambda session: session.text  # noqa: E731
        from asr.cli import child_env

        server = subprocess.Popen(
            [sys.executable, "-m", "asr.cli.serve", "--checkpoint", args.checkpoint, "--port", "0",
             "--chunk-size", str(args.chunk_size), "--left-chunks", str(args.left_chunks), "--beam", str(args.beam),
             "--max-connections", str(max(args.counts) + args.list_flood),
             "--max-connections-per-client", str(max(args.counts) + args.list_flood),
             # the whole file reaches the decoder, so its final can equal the offline one
             "--no-endpoint", "--vad", "none", "--threads", str(args.threads),
             "--backend", args.backend, *(["--onnx-model", args.onnx_model] if args.onnx_model else []),
             *lm_argv(args)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=child_env(),
        )
    try:
        if args.backend != "sherpa-onnx":
            line = server.stdout.readline()
            if not line.startswith("serving on "):
                print(f"error: the server did not start: {line!r}", file=sys.stderr)
                return 2
            uri = line.split()[2]
        print("| clients | p50 latency ms | p95 latency ms | server CPU (cores) | finals == reference "
              "| CPU per stream (cores) | hotwords per client |")
        print("|---|---|---|---|---|---|---|")
        k = args.hotwords_per_client
        # distinct lists, up to 40 per flooder and run (a list costs the server a fraction of a second or more)
        flood_with = flood_starts(tokenizer, 40 * args.list_flood) if args.list_flood else None
        for n in args.counts:
            replies = {}  # flooded or not -> the real-time clients' reply latency and gaps
            runs = [(None, None)] + ([(client_lists(pool, n, k), None)] if k else [])
            for lists, flooding in runs + ([(None, flood_with)] if flood_with else []):
                expected = ([reference[i % len(waves)] for i in range(n)] if lists is None else
                            offline_texts(args, [waves[i % len(waves)] for i in range(n)], model, tokenizer,
                                          features, lists))
                cpu0, wall0 = cpu_seconds(server.pid), time.perf_counter()
                try:
                    chosen, sessions, flooded = asyncio.run(run_clients(uri, waves, n, args, lists, flooding))
                except asyncio.TimeoutError:
                    print(f"| {n} | timed out after {args.max_seconds} s | | | | | {k if lists else 0} |", flush=True)
                    continue
                used = cpu_seconds(server.pid) - cpu0
                cores = used / (time.perf_counter() - wall0)
                per_stream = used / (sum(w.numel() for w in chosen) / SAMPLE_RATE)  # cores a real-time stream needs
                lat = [x for w, s in zip(chosen, sessions)
                       for x in chunk_latencies(s, w.numel(), args.chunk_size, model.encoder, SAMPLE_RATE, features)]
                # latency catches replies held back and then sent in a burst (their gaps are short)
                replies[flooding is not None] = ", ".join(
                    f"{what} p95 {1000 * percentile(x, 95):.0f} ms (max {1000 * max(x, default=math.nan):.0f})"
                    for what, x in (("latency", lat), ("gap", [g for s in sessions for g in reply_gaps(s)])))
                if flooding is not None:
                    waits = [t for _, t in flooded]
                    print(f"list flood beside {n} real-time clients: {len(flooded)} lists of 2000 phrases x 100 "
                          f"characters started by {args.list_flood} connections ({sum(st == 'ok' for st, _ in flooded)} "
                          f"ready; first reply median {percentile(waits, 50):.2f} s, max {max(waits, default=math.nan):.2f} "
                          f"s); real-time replies with it: {replies[True]}; without: {replies[False]}; server RSS "
                          f"after it {rss_mib(server.pid):.0f} MiB", flush=True)
                    continue
                same = sum(final_text(s) == expected[i] for i, s in enumerate(sessions))
                print(f"| {n} | {1000 * percentile(lat, 50):.0f} | {1000 * percentile(lat, 95):.0f} | {cores:.2f} | "
                      f"{same}/{n} | {per_stream:.4f} | {k if lists else 0} |", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
