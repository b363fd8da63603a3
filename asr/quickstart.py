"""The quickstart's bookkeeping (``scripts/quickstart.py`` runs the steps): whether the corpus is
there, which run folder a training goes to, and which earlier results a step may reuse.

A run folder records what it trained on (:data:`CORPUS_STAMP`: the corpus profile, a digest of
the train split and tokenizer, and of the recipe under ``conf/``); a finished or interrupted run
of another corpus or recipe is never reused or resumed, and a new timestamped run is trained beside
it instead. A decode summary is reused only for the same checkpoint and LMs.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

from asr.cli import CHECKOUT, child_env
from asr.lm import lm_path, word_lm_path
from asr.synth.corpus import corpus_profile
from asr.synth.noise_bank import NOISE_BANK_MANIFEST
from asr.synth.profiles import DEFAULT_PROFILE, PROFILES
from asr.train.config import repository_conf_dir

# What scripts/prepare_data.py writes by default. The tokenizer file is named after its
# type and size, so a corpus prepared with an older default (unigram256) is detected
# and prepared again: the synthesized splits are kept, tokenizer and CMVN are redone.
TRAIN_MANIFEST, TOKENIZER_MODEL = "cuts_train.jsonl.gz", "tokenizer/bpe256.model"
# The noise bank is the room recipe's background (data.background.noise_cuts); a corpus prepared before
# it existed gets it from prepare_data without its splits being synthesized again.
CORPUS_FILES = (TRAIN_MANIFEST, "cuts_dev.jsonl.gz", "cuts_test.jsonl.gz", "cmvn.json", TOKENIZER_MODEL,
                str(lm_path(".").relative_to(".")), str(word_lm_path(".").relative_to(".")), NOISE_BANK_MANIFEST)


def corpus_ready(data_dir: Path, profile: str = DEFAULT_PROFILE) -> bool:
    """All files there, and the train split built with ``profile`` (else prepare_data rebuilds it)."""
    return all((data_dir / name).exists() for name in CORPUS_FILES) and corpus_profile(data_dir) == profile


def recipe_for(profile: str) -> str:
    """The experiment (conf/experiment/) the quickstart trains on a corpus of ``profile``: the room
    curriculum (``quickstart_rooms``: a clean epoch, then the rooms beside the clean copies) when the
    profile writes clean copies beside its rooms, which that recipe reads; else ``quickstart``."""
    if profile not in PROFILES:
        raise ValueError(f"unknown synth profile {profile!r}; known: {', '.join(PROFILES)}")
    return "quickstart_rooms" if PROFILES[profile].clean_copy else "quickstart"


# Written into the run folder when training starts: what the run learns from and with which
# recipe. A finished or interrupted run of another corpus (another profile, a rebuilt train
# split or tokenizer) or recipe (conf/) is never reused or resumed; the quickstart trains a
# new run beside it instead.
CORPUS_STAMP = "quickstart_corpus.json"


def recipe_digest(conf_dir: Path | None = None) -> str:
    """sha256 of every Hydra config file (names and bytes) in ``conf_dir`` (None: the repository's): a
    changed recipe (another fbank preset, say) must not find its old finished run and decode that model
    as the new one."""
    conf_dir = repository_conf_dir() if conf_dir is None else conf_dir
    digest = hashlib.sha256()
    for path in sorted(conf_dir.rglob("*.yaml")):
        digest.update(str(path.relative_to(conf_dir)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def corpus_fingerprint(data_dir: Path, conf_dir: Path | None = None) -> dict:
    """The corpus profile, a digest of the train manifest and tokenizer (a few MB to read), and the
    recipe's (:func:`recipe_digest`)."""
    digest = hashlib.sha256()
    for name in (TRAIN_MANIFEST, TOKENIZER_MODEL):
        digest.update((data_dir / name).read_bytes())
    return {"data_dir": str(data_dir), "profile": corpus_profile(data_dir), "sha256": digest.hexdigest(),
            "recipe": recipe_digest(conf_dir)}


def timestamped(run_dir: Path) -> Path:
    """A new run folder beside ``run_dir``, named after the time."""
    return Path(f"{run_dir}_{time.strftime('%Y%m%d_%H%M%S')}")


def choose_run_dir(run_dir: Path, fingerprint: dict) -> Path:
    """``run_dir``, unless it holds a run of another corpus or recipe: then a new timestamped folder beside it."""
    stamp = run_dir / CORPUS_STAMP
    if stamp.is_file():
        trained_on = json.loads(stamp.read_text())
        if trained_on != fingerprint:
            new = timestamped(run_dir)
            what = "recipe (conf/)" if {**trained_on, "recipe": None} == {**fingerprint, "recipe": None} else (
                f"corpus (profile {trained_on.get('profile')!r} in {trained_on.get('data_dir')}; now "
                f"{fingerprint['profile']!r} in {fingerprint['data_dir']})")
            print(f"{run_dir} holds a run of another {what}: training a new run in {new}")
            return new
    elif (run_dir / "checkpoints").is_dir():
        print(f"warning: {run_dir} was trained before the quickstart recorded its corpus; if "
              f"{fingerprint['data_dir']} changed since (e.g. the default profile, now {fingerprint['profile']!r}), "
              f"use --retrain")
    return run_dir


def first_test_audio(data_dir: Path) -> str | None:
    """Path of the first test utterance's audio (read straight from the manifest)."""
    with gzip.open(data_dir / "cuts_test.jsonl.gz", "rt") as f:
        for line in f:
            cut = json.loads(line)
            recording = cut.get("recording") or {}
            for source in recording.get("sources", []):
                if source.get("type") == "file":
                    # Manifests store audio paths relative to the corpus folder.
                    path = Path(source["source"])
                    return str(path if path.is_absolute() else data_dir / path)
    return None


def lm_paths(summary: dict) -> tuple[str | None, str | None]:
    """The token and word LM files a decode summary was made with (None: not used)."""
    lm = summary.get("lm") or {}
    return lm.get("path"), (lm.get("word_lm") or {}).get("path")


def reusable_summary(out_dir: Path, ckpt: Path, lms: tuple[Path, Path] | None = None) -> dict | None:
    """The ``summary.json`` a decode of ``ckpt`` with the same (token, word) LMs (None: none) left in
    ``out_dir``; None when there is none or it was made otherwise."""
    done = out_dir / "summary.json"
    if not done.is_file():
        return None
    summary = json.loads(done.read_text())
    wanted = (str(lms[0]), str(lms[1])) if lms else (None, None)
    return summary if summary["ckpt"] == str(ckpt) and lm_paths(summary) == wanted else None



def reusable_report(path: Path, ckpt: Path) -> dict | None:
    """The JSON report a benchmark of ``ckpt`` left at ``path`` (its ``config.checkpoint``); None when there is
    none or it measured another checkpoint."""
    if not path.is_file():
        return None
    report = json.loads(path.read_text())
    return report if report.get("config", {}).get("checkpoint") == str(ckpt) else None


def run_step(cmd: list[str], what: str) -> None:
    """Run one step from the repository root, streaming its output; stop the quickstart with the step's exit
    code on failure. A ``python -m asr...`` step runs this checkout's package, whatever is installed."""
    print(f"\n=== {what}\n$ {' '.join(cmd)}", flush=True)
    code = subprocess.call(cmd, cwd=CHECKOUT, env=child_env())
    if code != 0:
        sys.exit(f"quickstart: step '{what}' failed with exit code {code}")


def decode(ckpt: Path, out_dir: Path, modes: str, chunk: int, threads: int, split: str = "test",
           lms: tuple[Path, Path] | None = None) -> dict:
    """Decode ``split`` with decode.py's program (``asr.cli.decode``) into ``out_dir``, or read the results a
    run with the same checkpoint and LMs left there. ``lms``: the (token, word) LMs to fuse, or None."""
    summary = reusable_summary(out_dir, ckpt, lms)
    if summary is not None:
        print(f"decode results of {ckpt.name} found in {out_dir}")
        return summary
    cmd = [sys.executable, "-m", "asr.cli.decode", "--checkpoint", str(ckpt), "--split", split, "--modes", modes,
           "--chunk-size", str(chunk), "--out-dir", str(out_dir), "--threads", str(threads)]
    if lms is not None:
        cmd += ["--lm", str(lms[0]), "--word-lm", str(lms[1])]
    run_step(cmd, f"decode {split} ({'full context' if chunk == 0 else f'chunk {chunk}'}{' + LMs' if lms else ''})")
    return json.loads((out_dir / "summary.json").read_text())
