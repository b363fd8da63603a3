"""Hotword biasing benchmark: WER, U-WER and B-WER per list size, with and without the LMs.

Decodes a biasing split (scripts/prepare_data.py --biasing: sentences holding rare words, each
utterance with its own list of those words plus N distractors) full context with the CTC prefix
beam and attention rescoring, for no biasing and N = 0/100/500/1000 (--sizes), without LMs and,
when --lm / --word-lm are given, with them. Then the false-alarm check: ordinary test utterances
decoded with and without one 1000-word list none of them holds. Prints Markdown tables, the search
CPU time with N = 1000 against no biasing, and the compile time of 1000-phrase lists; writes all
numbers to --out as JSON.

Usage:
    python scripts/bench_biasing.py --checkpoint CKPT --biasing-dir data/synth_biasing
    python scripts/bench_biasing.py --checkpoint CKPT --biasing-dir data/synth_biasing \
        --lm data/synth/lm/4gram.arpa.gz --word-lm data/synth/lm/words_3gram.arpa.gz --out biasing.json
    # choosing the settings on the dev split (dev voices; never on the test voices):
    python scripts/bench_biasing.py --checkpoint CKPT --biasing-dir data/synth_biasing --split biasing_dev \
        --sizes 100 --scores 1,2,3,4 --rescore-weights 0,0.5,1 --no-false-alarm
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from omegaconf import OmegaConf


from asr.decode.hotwords import HotwordCompiler, add_hotword_arguments, read_hotwords  # noqa: E402
from asr.evaluation.biasing import (compile_times_ms, decode_setting, encode_all, median, read_lists,  # noqa: E402
                                    utterance_list)
from asr.evaluation.split import load_utterances  # noqa: E402
from asr.decode.options import (add_checkpoint_argument, add_search_arguments, add_threads_argument,  # noqa: E402
                                options_from_args, set_threads)
from asr.lm import add_lm_arguments, fusion_from_args  # noqa: E402


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_checkpoint_argument(parser)
    parser.add_argument("--biasing-dir", required=True, help="where prepare_data.py --biasing put the splits")
    parser.add_argument("--split", default="biasing_test", help="biasing_test (test voices) or biasing_dev")
    parser.add_argument("--sizes", default="0,100,500,1000", help="distractors per list (comma-separated)")
    parser.add_argument("--scores", help="hotword scores to compare (comma-separated; default --hotword-score)")
    parser.add_argument("--rescore-weights", help="shares of the bonus rescoring keeps (default --hotword-rescore-weight)")
    add_search_arguments(parser)
    parser.add_argument("--max-utts", type=int, help="only the first N utterances of each set")
    parser.add_argument("--false-alarm-cuts", help="ordinary utterances (default: cuts_test of the model's corpus)")
    parser.add_argument("--no-false-alarm", action="store_true", help="skip the false-alarm check")
    parser.add_argument("--compile-lists", type=int, default=20, help="1000-phrase lists timed for compiling")
    parser.add_argument("--out", help="write every number as JSON here")
    add_threads_argument(parser, default=1)  # one thread: steady CPU times
    add_hotword_arguments(parser)
    add_lm_arguments(parser)
    args = parser.parse_args(argv)
    options_from_args(args, parser)
    args.sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    args.scores = floats(args.scores) if args.scores else [args.hotword_score]
    args.rescore_weights = floats(args.rescore_weights) if args.rescore_weights else [args.hotword_rescore_weight]
    return args


def pct(x: float) -> str:
    return f"{100 * x:.2f}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    set_threads(args.threads)
    from asr.train.checkpoint import load_model

    model, tokenizer, cfg = load_model(args.checkpoint)
    model.eval()
    bias_dir = Path(args.biasing_dir)
    lists = read_lists(bias_dir / "biasing" / f"{args.split}_lists.jsonl")
    eval_set = load_utterances(bias_dir / f"cuts_{args.split}.jsonl.gz", bias_dir, args.max_utts)
    encoded, encode_s = encode_all(model, eval_set)
    entries = [lists[u.key] for u in encoded]
    own = [utterance_list(e, 0) for e in entries]
    print(f"{args.split}: {len(encoded)} utterances, {sum(len(o) for o in own)} rare words in them; "
          f"encoder {encode_s:.1f} CPU s", flush=True)
    fusions = [("none", None)]
    lm = fusion_from_args(args, tokenizer)
    if lm is not None:
        fusions.append(("LMs", lm))
    results: dict = {"split": args.split, "utterances": len(encoded), "encode_cpu_s": encode_s, "rows": []}
    header = ("| LM | list | score | CTC beam WER | U-WER | B-WER | "
              + " | ".join(f"rescored (keep {w:g}) WER | U-WER | B-WER" for w in args.rescore_weights)
              + " | search CPU s |")
    print("\n" + header)
    print("|" + "---|" * (header.count("|") - 1))
    settings = [(None, None)] + [(n, s) for s in args.scores for n in args.sizes]
    for lm_name, fusion in fusions:
        for size, score in settings:
            compiler = HotwordCompiler(tokenizer, score or args.hotword_score, cache_size=0)
            decode_lists = [None] * len(entries) if size is None else [utterance_list(e, size) for e in entries]
            scored = own if size is None else decode_lists
            row = decode_setting(model, tokenizer, encoded, decode_lists, scored, compiler, fusion, args.beam,
                                 args.ctc_weight, args.rescore_weights, args.hotword_unbiased_keep, args.reverse_weight)
            cells = [row.ctc] + [row.rescored[w] for w in args.rescore_weights]
            label = "none" if size is None else f"N={size}"
            print(f"| {lm_name} | {label} | {'-' if score is None else f'{score:g}'} | "
                  + " | ".join(f"{pct(c.wer)} | {pct(c.u_wer)} | {pct(c.b_wer)}" for c in cells)
                  + f" | {row.search_cpu_s:.1f} |", flush=True)
            results["rows"].append({"lm": lm_name, "size": size, "score": score, "ctc": row.ctc.summary(),
                                    "rescored": {str(w): c.summary() for w, c in row.rescored.items()},
                                    "search_cpu_s": row.search_cpu_s, "compile_cpu_s": row.compile_cpu_s})
    # Cost: search CPU with the biggest list against none, per LM setting (same run, same utterances).
    biggest = max(args.sizes)
    for lm_name, _ in fusions:
        rows = [r for r in results["rows"] if r["lm"] == lm_name]
        none = next(r for r in rows if r["size"] is None)
        big = next(r for r in rows if r["size"] == biggest and r["score"] == args.scores[0])
        total_none = encode_s + none["search_cpu_s"]
        total_big = encode_s + big["search_cpu_s"] + big["compile_cpu_s"]
        print(f"\ncost ({lm_name}): search CPU N={biggest} {big['search_cpu_s']:.1f} s vs none "
              f"{none['search_cpu_s']:.1f} s = {big['search_cpu_s'] / none['search_cpu_s']:.2f}x; with the encoder "
              f"and compiling every list: {total_big / total_none:.2f}x")
        results[f"cost_{lm_name}"] = {"search_ratio": big["search_cpu_s"] / none["search_cpu_s"],
                                      "end_to_end_ratio": total_big / total_none}
    # Compile time of 1000-phrase lists (the distractor lists; fresh compiler each, so no cache).
    big_lists = [utterance_list(e, biggest) for e in entries[:args.compile_lists]]
    times, cpu_times = compile_times_ms(lambda: HotwordCompiler(tokenizer, args.hotword_score, cache_size=0),
                                        big_lists)
    cached = HotwordCompiler(tokenizer, args.hotword_score)
    cached.compile(big_lists[0])
    start = time.perf_counter()
    cached.compile(list(reversed(big_lists[0])))  # same content, other order: a cache hit
    hit_ms = 1000 * (time.perf_counter() - start)
    print(f"compile {len(big_lists[0])}-phrase lists: median {median(times):.1f} ms wall ({median(cpu_times):.1f} ms "
          f"CPU), max {max(times):.1f} ms wall ({max(cpu_times):.1f} CPU) over {len(times)} lists; cached "
          f"{hit_ms:.2f} ms")
    results["compile_ms"] = {"median": median(times), "max": max(times), "median_cpu": median(cpu_times),
                             "max_cpu": max(cpu_times), "cached": hit_ms}
    if not args.no_false_alarm:
        results["false_alarm"] = false_alarm(args, cfg, model, tokenizer, fusions)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))
        print(f"results: {args.out}")
    return 0


def false_alarm(args, cfg, model, tokenizer, fusions) -> list[dict]:
    """Ordinary utterances with no list and with the 1000-word false-alarm list (they hold none of its words)."""
    cuts = args.false_alarm_cuts or Path(OmegaConf.select(cfg, "data.data_dir")) / "cuts_test.jsonl.gz"
    words = [text for text, _ in read_hotwords(Path(args.biasing_dir) / "biasing" / "false_alarm.txt")]
    eval_set = load_utterances(cuts, None, args.max_utts)
    vocab = set(words)
    kept = [u for u in eval_set.utterances if not vocab & set(u.text.split())]
    eval_set.utterances = kept
    encoded, _ = encode_all(model, eval_set)
    print(f"\nfalse alarms: {len(kept)} ordinary utterances ({cuts}), list of {len(words)} rare words\n")
    print("| LM | list | CTC beam WER | rescored WER |")
    print("|---|---|---|---|")
    out = []
    compiler = HotwordCompiler(tokenizer, args.hotword_score)
    for lm_name, fusion in fusions:
        for label, decode_list in (("none", None), (f"{len(words)} rare words", words)):
            row = decode_setting(model, tokenizer, encoded, [decode_list] * len(encoded), [words] * len(encoded),
                                 compiler, fusion, args.beam, args.ctc_weight, [args.hotword_rescore_weight],
                                 args.hotword_unbiased_keep, args.reverse_weight)
            rescored = row.rescored[args.hotword_rescore_weight]
            print(f"| {lm_name} | {label} | {pct(row.ctc.wer)} | {pct(rescored.wer)} |", flush=True)
            out.append({"lm": lm_name, "list": label, "ctc_wer": row.ctc.wer, "rescored_wer": rescored.wer})
    return out


if __name__ == "__main__":
    sys.exit(main())
