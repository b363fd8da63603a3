"""End-to-end quickstart on CPU: corpus -> training -> decoding -> streaming.

Usage (from the repository root):
    python scripts/quickstart.py                  # everything, 45-100 minutes on a 2-core CPU (hosts differ)
    python scripts/quickstart.py --train-minutes 20   # stop training earlier (before its 8360 steps)
    python scripts/quickstart.py --retrain        # train again in a new run folder
    python scripts/quickstart.py --help

Steps (each one reuses what earlier runs left):
 1. build the synthetic corpus, tokenizer, token and word LMs and CMVN in data/synth
    (scripts/prepare_data.py) unless they exist: by default every train sentence twice from one
    synthesis, clean and in a room with noise, music or babble (the profile
    neural_hibari_capture30_rooms_curriculum; --profile for another); with flite installed also the xengine
    split (the test sentences read by flite's awb and rms voices: another engine,
    evaluation only), and the capture split (the test utterances through a browser's or a
    network's capture paths: resampling, gain control, noise suppression, telephone, MP3,
    clipping; evaluation only), and the CMVN of the recipe's fbank (cmvn_sherpa.json:
    sherpa-onnx's features, so the model deploys there; asr.train.run.ensure_run_cmvn builds the
    training's feature store first and reads the stats from it);
 2. train the profile's recipe (asr.quickstart.recipe_for: experiment=quickstart_rooms, a clean epoch
    and then the clean copies beside half of the room copies, noise from the corpus's noise bank 5-30 dB
    under half of those, for the default profile;
    experiment=quickstart for a profile without clean copies) with scripts/train.py: 8360 steps, in bf16
    autocast where a probe finds it faster on this host (asr.train.precision) and on tcmalloc, else the
    tbb wheel's allocator (asr.train.allocator), about 27 min on 2 idle cores with AVX512-BF16 (30 on
    glibc's malloc, 24 on tcmalloc; hosts differ), capped by the recipe's trainer.max_time (55 min) or
    --train-minutes, into exp/quickstart_rel_xl, resuming an interrupted run there; skipped when that
    run finished; a run of another corpus or recipe (its quickstart_corpus.json differs: train split,
    tokenizer, profile or a file under conf/) is left alone and a new timestamped run folder is trained
    beside it;
 3. average the best checkpoints (scripts/average_checkpoints.py);
 4. decode the test split full-context (attention_rescoring, ctc_greedy) and streaming
    at chunk 16 (scripts/decode.py) into <run dir>/decode/test_full and test_chunk16
    (summary.json: WER, CER, RTF and skipped cuts; <mode>.jsonl: one line per utterance),
    the xengine split full-context into decode/xengine_full when it exists, and the capture
    split into decode/capture_full; then
    attention rescoring again with the token LM and the word LM (with its lexicon) fused
    (decode/<split>_<context>_lm): the rows without them say what the acoustic model hears,
    the "+ LM" rows what a user gets;
 5. stream one test utterance chunk by chunk with the LMs (scripts/stream.py --lm --word-lm);
    then the live bench (scripts/bench_live.py) on a few test sessions of five sentences with
    pauses, over exact zeros and room tone, through scripts/serve.py's continuous decoding
    (~1 min) into decode/live_test/live.json, and the robustness benchmark
    (scripts/bench_robust.py) on 40 test sentences alone under babble (with flite), music,
    pink noise at 20 and 10 dB SNR and a room, backgrounds no training generator made, into
    decode/robust_test/robust.json (and robust.png, WER against SNR);
 6. print a summary table: WER per mode (read from those summary.json files; the live rows:
    session WER, and the same sentences sent alone; the robust rows: WER per background and level),
    where checkpoints, logs and results are, time;
    when --train-minutes ended training early, at which of the planned steps and the last dev
    WERs (asr.train.outcome).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
sys.path.insert(0, str(ROOT))

from asr.decode.options import add_threads_argument  # noqa: E402
from asr.lm import lm_path, word_lm_path  # noqa: E402
from asr.quickstart import (CORPUS_STAMP, choose_run_dir, corpus_fingerprint, corpus_ready,  # noqa: E402
                            decode, first_test_audio, recipe_for, reusable_report, run_step, timestamped)
from asr.synth.capture import CAPTURE_FILE  # noqa: E402
from asr.synth.profiles import DEFAULT_PROFILE, PROFILES  # noqa: E402
from asr.synth.xengine import XENGINE_FILE  # noqa: E402
from asr.train.outcome import max_time_string, outcome_lines, read_outcome, run_conditions  # noqa: E402


def run(cmd: list[str], what: str) -> None:
    """Run one step (``asr.quickstart.run_step``)."""
    run_step(cmd, what)


LIVE_SESSIONS, LIVE_BACKGROUNDS = 4, "zeros,room"


def live_bench(ckpt: Path, out_dir: Path, data_dir: Path, threads: int) -> dict:
    """The live bench on LIVE_SESSIONS test sessions (unpaced: WER does not depend on the pace), or the
    report a run with the same checkpoint left in ``out_dir``."""
    done = out_dir / "live.json"
    report = reusable_report(done, ckpt)
    if report is not None:
        print(f"live bench results of {ckpt.name} found in {out_dir}")
        return report
    run([PY, "scripts/bench_live.py", "--checkpoint", str(ckpt), "--cuts", str(data_dir / "cuts_test.jsonl.gz"),
         "--sessions", str(LIVE_SESSIONS), "--backgrounds", LIVE_BACKGROUNDS, "--speed", "0", "--concurrency", "4",
         "--max-seconds", "300", "--server-args", f"--threads {threads}", "--out-json", str(done)],
        "live sessions (test sentences with pauses over zeros and room tone, through the server)")
    return json.loads(done.read_text())


# Sentences alone under the robustness benchmark's own backgrounds (babble only with flite, which reads it)
ROBUST_UTTERANCES, ROBUST_SNRS, ROBUST_RT60S = 40, "20,10", "0.6"
ROBUST_PLOT = "robust.png"  # WER against SNR, beside robust.json


def robust_bench(ckpt: Path, out_dir: Path, data_dir: Path, threads: int) -> dict:
    """The robustness benchmark on ROBUST_UTTERANCES test sentences alone (no sessions: the live bench has
    them), or the report a run with the same checkpoint left in ``out_dir``; drawn as WER against SNR
    into ``out_dir``/ROBUST_PLOT."""
    from asr.bench.robust_plot import plot_wer_against_snr
    from asr.synth.xengine import flite_path

    done = out_dir / "robust.json"
    report = reusable_report(done, ckpt)
    if report is not None:
        print(f"robustness results of {ckpt.name} found in {out_dir}")
    else:
        kinds = ("babble," if flite_path() else "") + "music,pink,reverb"
        run([PY, "scripts/bench_robust.py", "--checkpoint", str(ckpt), "--cuts", str(data_dir / "cuts_test.jsonl.gz"),
             "--kinds", kinds, "--snrs", ROBUST_SNRS, "--rt60s", ROBUST_RT60S, "--utterances", str(ROBUST_UTTERANCES),
             "--sessions", "0", "--threads", str(threads), "--out-json", str(done)],
            "robustness (test sentences under babble, music, noise and a room the training never made)")
        report = json.loads(done.read_text())
    plot_wer_against_snr([(ckpt.parents[1].name, report)], out_dir / ROBUST_PLOT)
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default="data/synth")
    parser.add_argument("--run-dir", default="exp/quickstart_rel_xl")
    parser.add_argument("--profile", default=DEFAULT_PROFILE, choices=list(PROFILES),
                        help=f"synth corpus profile (scripts/prepare_data.py --profile; default {DEFAULT_PROFILE})")
    parser.add_argument("--train-minutes", type=float, default=None,
                        help="wall-clock cap on training (default: the recipe's trainer.max_time, 55 min for the "
                             "room recipe, whose 8360 steps take about 27 min on 2 idle cores with AVX512-BF16 (30 on "
                             "glibc's malloc, 24 on tcmalloc), 35 for the clean one; "
                             "a slower machine stops at the cap, before the learning rate has decayed)")
    parser.add_argument("--average", type=int, default=3, help="average this many best checkpoints (0: best only)")
    parser.add_argument("--retrain", action="store_true", help="train again in a new timestamped run folder")
    # Two, not torch's default: its decoding RTFs are recorded at two threads, and bench_live's server takes >= 1.
    add_threads_argument(parser, default=2)
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for scripts/train.py")
    args = parser.parse_args(argv)
    start = time.monotonic()
    data_dir = ROOT / args.data_dir
    run_dir = Path(args.run_dir)
    if args.retrain:
        run_dir = timestamped(run_dir)
    run_dir = run_dir if run_dir.is_absolute() else ROOT / run_dir

    if corpus_ready(data_dir, args.profile):
        print(f"corpus ({args.profile}), tokenizer, LM and CMVN found in {data_dir}")
    else:
        # --xengine: the test sentences read by flite too, when flite is installed (else a skip message)
        run([PY, "scripts/prepare_data.py", "--data-dir", str(data_dir), "--xengine", "--capture",
             "--profile", args.profile], "prepare synth corpus")
    if not (data_dir / CAPTURE_FILE).is_file():  # a corpus prepared before the capture split existed
        run([PY, "scripts/prepare_data.py", "--data-dir", str(data_dir), "--capture-only"], "build the capture split")
    # The recipe's fbank preset (sherpa-onnx's: conf/experiment/quickstart.yaml, or a features= override)
    # reads its own stats file, which prepare_data.py does not write: computed once when missing.
    from asr.train.run import ensure_run_cmvn

    recipe = recipe_for(args.profile)
    ensure_run_cmvn(data_dir, [f"experiment={recipe}", *args.overrides])

    fingerprint = corpus_fingerprint(data_dir)
    run_dir = choose_run_dir(run_dir, fingerprint)
    summary_file = run_dir / "train_summary.json"
    if summary_file.is_file():
        print(f"training already finished in {run_dir} (use --retrain to train again)")
    else:
        # the recipe's own trainer.max_time unless --train-minutes says otherwise
        cap = [] if args.train_minutes is None else [f"trainer.max_time={max_time_string(args.train_minutes)}"]
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / CORPUS_STAMP).write_text(json.dumps(fingerprint, indent=2))
        run([PY, "scripts/train.py", f"experiment={recipe}", f"hydra.run.dir={run_dir}",
             f"data.data_dir={args.data_dir}", *cap, "resume=true", *args.overrides], "train")
    train_summary = json.loads(summary_file.read_text())

    ckpt = Path(train_summary["best_checkpoint"] or run_dir / "checkpoints" / "last.ckpt")
    if args.average > 1:
        avg = run_dir / "checkpoints" / f"avg{args.average}.ckpt"
        run([PY, "scripts/average_checkpoints.py", str(run_dir), "--num", str(args.average), "--out", str(avg)],
            "average checkpoints")
        ckpt = avg

    results = run_dir / "decode"
    lms = (lm_path(data_dir), word_lm_path(data_dir))
    # (row label, summary); the LM rows decode attention rescoring only: greedy takes no LM
    decoded = [("full context", decode(ckpt, results / "test_full", "attention_rescoring,ctc_greedy", 0,
                                       args.threads)),
               ("full + LM", decode(ckpt, results / "test_full_lm", "attention_rescoring", 0, args.threads,
                                    lms=lms)),
               ("chunk 16", decode(ckpt, results / "test_chunk16", "attention_rescoring,ctc_greedy", 16,
                                   args.threads)),
               ("chunk 16 + LM", decode(ckpt, results / "test_chunk16_lm", "attention_rescoring", 16,
                                        args.threads, lms=lms))]
    # Another engine (flite) reading the test sentences: does the model hear speech or eSpeak?
    has_xengine = (data_dir / XENGINE_FILE).is_file()
    if has_xengine:
        decoded += [("xengine full", decode(ckpt, results / "xengine_full", "attention_rescoring,ctc_greedy", 0,
                                            args.threads, split="xengine")),
                    ("xengine + LM", decode(ckpt, results / "xengine_full_lm", "attention_rescoring", 0,
                                            args.threads, split="xengine", lms=lms))]

    # The test utterances through capture paths (a browser's resampling and gain control, a phone, a codec)
    decoded += [("capture full", decode(ckpt, results / "capture_full", "attention_rescoring,ctc_greedy", 0,
                                        args.threads, split="capture")),
                ("capture + LM", decode(ckpt, results / "capture_full_lm", "attention_rescoring", 0,
                                        args.threads, split="capture", lms=lms))]

    audio = first_test_audio(data_dir)
    if audio:
        run([PY, "scripts/stream.py", "--checkpoint", str(ckpt), "--chunk-size", "16", "--lm", str(lms[0]),
             "--word-lm", str(lms[1]), audio], "stream one test file (with the LMs)")
    live = live_bench(ckpt, results / "live_test", data_dir, args.threads)
    robust = robust_bench(ckpt, results / "robust_test", data_dir, args.threads)

    rows = [(ctx, m, r) for ctx, summary in decoded for m, r in summary["modes"].items()]
    skipped = {ctx: s["skipped_utterances"] for ctx, s in decoded if s.get("skipped_utterances")}
    print("\n" + "=" * 72)
    print(f"{'context':<14}{'mode':<22}{'WER %':>8}{'CER %':>8}{'RTF':>8}")
    for ctx, mode, r in rows:
        print(f"{ctx:<14}{mode:<22}{100 * r['wer']:>8.2f}{100 * r['cer']:>8.2f}{r['rtf']:>8.3f}")
    for name, b in live["backgrounds"].items():  # WER of the sessions; the same sentences alone beside it
        if b.get("session_wer") is not None:
            mode = f"session (alone {100 * b['alone_wer']:.2f})"
            print(f"{'live ' + name:<14}{mode:<22}{100 * b['session_wer']:>8.2f}")
    for name in robust["conditions"]:  # the test sentences alone under each background and level
        print(f"{'robust':<14}{name:<22}{100 * robust['alone'][name]['wer']:>8.2f}")
    wer = train_summary["best_val_wer"]
    print("-" * 72)
    print(f"checkpoint  : {ckpt}")
    print(f"logs        : {', '.join(train_summary['log_dirs'])}  (tensorboard --logdir {run_dir})")
    print(f"results     : {results}/<split>_<context>[_lm]/summary.json")
    if (plot := results / "robust_test" / ROBUST_PLOT).is_file():
        print(f"robust plot : {plot} (WER against SNR per background)")
    print(f"LMs         : {lms[0]} (token n-gram; decode.py --lm), {lms[1]} (word n-gram and lexicon; "
          f"--word-lm), both from the train transcripts")
    if not has_xengine:
        print(f"xengine     : not decoded (no {XENGINE_FILE}: apt-get install -y flite, then "
              f"python scripts/prepare_data.py --data-dir {args.data_dir} --xengine)")
    if skipped:
        print(f"skipped cuts: {skipped}")
    print(f"best dev WER: {'n/a' if wer is None else f'{100 * wer:.2f}%'} after {train_summary['global_step']} steps")
    for line in outcome_lines(read_outcome(train_summary),
                              cap_hint="a longer --train-minutes with --retrain trains every step"):
        print(f"training    : {line}")
    print(f"train time  : {train_summary['seconds'] / 60:.1f} min{run_conditions(train_summary)}; "
          f"total {(time.monotonic() - start) / 60:.1f} min")
    print("=" * 72)


if __name__ == "__main__":
    main()
