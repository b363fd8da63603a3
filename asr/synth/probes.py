"""Length probe set: passages by held-out voices at fixed target lengths (5 s to 160 s).

The ablation asks how WER grows with utterance length for each position scheme,
while training utterances stay 1-10 s (mostly 2-6 s). Each probe is a passage of
sentences by one test voice (voices never heard in training) joined by short pauses,
whose length is within ``PROBE_TOLERANCE`` of its target. Every probe is a pure
function of (seed, target length, index), like the rest of the synth corpus, so two
builds give identical audio and transcripts whatever the number of workers.

Written to ``<data_dir>/cuts_probe.jsonl.gz`` (audio under ``audio/probe/``); each
cut's ``custom["probe_seconds"]`` is its target length.

The dev probe set (``voices="dev"``: ``cuts_probe_dev.jsonl.gz``, ``audio/probe_dev/``) is the
same recipe read by dev voices from another RNG stream: what training choices (the share of
passages in train, ``asr.synth.passages``) are tuned on, so the probe set stays evaluation only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import soundfile as sf
from lhotse import CutSet
from tqdm import tqdm

from asr.synth import corpus
from asr.data.manifest import write_cuts
from asr.synth.sentences import sentence_rng
from asr.synth.voices import draw_voice

PROBE_LENGTHS = (5, 10, 20, 40, 80, 160)
PROBE_PER_LENGTH = 20
# Passages stop at the first sentence that reaches (1 - tolerance) x target and never
# pass (1 + tolerance) x target; 8 % keeps every probe inside the promised 10 %.
PROBE_TOLERANCE = 0.08
PROBE_FILE = "cuts_probe.jsonl.gz"
DEV_PROBE_FILE = "cuts_probe_dev.jsonl.gz"
# voices -> (manifest, audio folder, RNG stream prefix). Test voices are unseen in training, so
# the probe measures length, not voice; dev voices are train's, with sentences of their own.
PROBE_SETS = {"test": (PROBE_FILE, "probe", "probe"), "dev": (DEV_PROBE_FILE, "probe_dev", "devprobe")}


def probe_id(seconds: int, index: int) -> str:
    """The cut id of probe ``index`` at target ``seconds``: ``probe040-003``."""
    return f"probe{seconds:03d}-{index:03d}"


def probe_target(cut_id: str) -> int:
    """The target length in seconds of a probe cut id (inverse of :func:`probe_id`)."""
    match = re.fullmatch(r"probe(\d+)-\d+", cut_id)
    if match is None:
        raise ValueError(f"{cut_id!r} is not a probe cut id (probe<seconds>-<index>)")
    return int(match.group(1))


def _make_probe(job: tuple[int, int, int, str, str]) -> tuple[corpus.UtteranceMeta, int]:
    """Pool task: synthesize probe ``index`` of target ``seconds`` and write its FLAC file."""
    seed, seconds, index, out_dir, voices = job
    _, audio_dir, stream = PROBE_SETS[voices]
    low, high = seconds * (1 - PROBE_TOLERANCE), seconds * (1 + PROBE_TOLERANCE)
    for attempt in range(corpus.MAX_ATTEMPTS):
        rng = sentence_rng(seed, f"{stream}{seconds}", index, attempt)
        voice = draw_voice(rng, voices)
        passage = corpus.join_sentences(rng, voice, low, high, low)
        if passage is not None:
            break
    else:
        raise RuntimeError(f"no {seconds} s probe within {PROBE_TOLERANCE:.0%} after {corpus.MAX_ATTEMPTS} tries")
    text, audio = passage
    cut_id = probe_id(seconds, index)
    rel_path = f"audio/{audio_dir}/{cut_id}.flac"
    sf.write(Path(out_dir) / rel_path, audio, corpus.SAMPLE_RATE, format="FLAC", subtype="PCM_16")
    meta = corpus.UtteranceMeta(cut_id, rel_path, text, voice.voice, voice.rate, voice.pitch, len(audio))
    return meta, seconds


def build_probe_set(
    out_dir: str | Path,
    seed: int = 0,
    lengths: Sequence[int] = PROBE_LENGTHS,
    per_length: int = PROBE_PER_LENGTH,
    workers: int = 2,
    voices: str = "test",
) -> CutSet:
    """Synthesize ``per_length`` probes at each target length (seconds) into ``out_dir``.

    ``voices``: "test" (the probe set) or "dev" (the dev probe set, for tuning).
    Returns the probe cuts (also written to ``<out_dir>/cuts_probe.jsonl.gz``, or
    ``cuts_probe_dev.jsonl.gz`` for dev), ordered by target length, then index.
    """
    if voices not in PROBE_SETS:
        raise ValueError(f"probe voices must be one of {sorted(PROBE_SETS)}, got {voices!r}")
    manifest, audio_dir, _ = PROBE_SETS[voices]
    if per_length < 1:
        raise ValueError(f"per_length ({per_length}) must be >= 1")
    if not lengths or any(s <= 0 for s in lengths):
        raise ValueError(f"lengths ({list(lengths)}) must be positive seconds")
    out = Path(out_dir)
    (out / "audio" / audio_dir).mkdir(parents=True, exist_ok=True)
    # Longest first: the pool's tail is then made of short jobs.
    jobs = [(seed, int(s), i, str(out), voices) for s in sorted(lengths, reverse=True) for i in range(per_length)]
    pool = corpus.start_pool(workers)
    results = []
    try:
        mapper = pool.imap_unordered if pool is not None else map
        total = sum(job[1] for job in jobs)
        with tqdm(total=total, unit="s", desc=f"synth {voices} probes") as bar:
            for meta, seconds in mapper(_make_probe, jobs):
                results.append((seconds, meta))
                bar.update(seconds)
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    cuts = []
    for seconds, meta in sorted(results, key=lambda r: (r[0], r[1].cut_id)):
        cut = corpus.to_cut(meta)
        cut.custom["probe_seconds"] = seconds
        cuts.append(cut)
    cutset = CutSet.from_cuts(cuts)
    write_cuts(cutset, out / manifest)
    return cutset
