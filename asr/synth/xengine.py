"""The ``xengine`` evaluation split: the test transcripts read by another synthesizer.

The embedded corpus is all eSpeak NG, so its ``test`` split (unseen eSpeak voices)
cannot tell a model that heard speech from one that learned eSpeak's signal. This
split renders the same test sentences with Debian's ``flite`` voices ``awb`` and
``rms`` (two male English voices of another engine), resampled to the corpus rate. It is for evaluation only: nothing trains or tunes on it.

flite is a system package (``apt-get install -y flite``), not a Python wheel, so a
machine without it skips the split with a message instead of failing. flite is
deterministic: two builds write the same audio.

Written to ``<data_dir>/cuts_xengine.jsonl.gz`` (audio under ``audio/xengine/<voice>/``);
cut ids are ``xengine-<voice>-<test cut id>``; ``custom["engine"]`` is ``"flite"``. The
dev transcripts give ``cuts_xengine_dev.jsonl.gz`` the same way: the split on which
robustness changes are compared, so the test one stays a final measurement.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import islice
from pathlib import Path

import numpy as np
import soundfile as sf
from lhotse import CutSet
from tqdm import tqdm

from asr.synth import corpus
from asr.data.audio import resample_int16
from asr.data.dataset import cut_text
from asr.data.features import SAMPLE_RATE
from asr.data.manifest import read_cuts, write_cuts

XENGINE_FILE = "cuts_xengine.jsonl.gz"
XENGINE_SOURCES = ("test", "dev")
FLITE_VOICES = ("awb", "rms")
INSTALL_HINT = "install flite with `apt-get install -y flite` (Debian/Ubuntu) and run again"


def xengine_file(source_split: str = "test") -> str:
    """The manifest name of the flite-read ``source_split``: cuts_xengine (test), cuts_xengine_<split> (others)."""
    return XENGINE_FILE if source_split == "test" else f"cuts_xengine_{source_split}.jsonl.gz"


def flite_path() -> str | None:
    """The ``flite`` executable on PATH, or None."""
    return shutil.which("flite")


@lru_cache(maxsize=4)
def flite_voices(flite: str = "flite") -> tuple[str, ...]:
    """The voices this flite has built in (``flite -lv``)."""
    listing = subprocess.run([flite, "-lv"], capture_output=True, text=True, timeout=30).stdout
    return tuple(listing.split(":", 1)[-1].split())


def render_flite(text: str, voice: str, flite: str = "flite", timeout_s: float = 60.0) -> np.ndarray:
    """``text`` read by flite ``voice`` -> (n,) int16 samples at the corpus rate.

    Raises ``ValueError`` for a voice flite does not have (flite itself would read
    the text with its default voice and exit 0), ``RuntimeError`` with flite's
    message when it fails or writes no audio.
    """
    if voice not in flite_voices(flite):
        raise ValueError(f"flite has no voice {voice!r}; it has {', '.join(flite_voices(flite))}")
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "out.wav"
        proc = subprocess.run([flite, "-voice", voice, "-t", text, "-o", str(wav)],
                              capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode != 0 or not wav.is_file():
            message = (proc.stderr or proc.stdout).strip().splitlines()
            raise RuntimeError(f"flite -voice {voice} failed ({proc.returncode}): {message[-1] if message else 'no output'}")
        samples, rate = sf.read(wav, dtype="int16")
    if samples.ndim > 1:
        samples = samples[:, 0]
    if rate != SAMPLE_RATE:
        samples = resample_int16(samples, rate, SAMPLE_RATE)
    if samples.size == 0:
        raise RuntimeError(f"flite -voice {voice} wrote no samples for {text!r}")
    return samples


@dataclass
class XengineResult:
    """What :func:`build_xengine_split` wrote and what it skipped (by reason)."""

    cuts: CutSet
    skipped: Counter = field(default_factory=Counter)

    @property
    def hours(self) -> float:
        return sum(c.duration for c in self.cuts) / 3600


def build_xengine_split(
    data_dir: str | Path,
    voices: Sequence[str] = FLITE_VOICES,
    source_split: str = "test",
    max_utts: int | None = None,
    render=render_flite,
) -> XengineResult:
    """Render the transcripts of ``cuts_<source_split>`` with each flite voice into the xengine split.

    ``render(text, voice) -> int16 samples`` is the synthesizer (flite by default; a
    test passes its own). A sentence the renderer fails on is skipped and counted
    under ``render_failed``; a source cut without text under ``no_text``.
    """
    out = Path(data_dir)
    source = out / f"cuts_{source_split}.jsonl.gz"
    if not source.is_file():
        raise FileNotFoundError(f"{source} not found: prepare the corpus first (python scripts/prepare_data.py)")
    if not voices:
        raise ValueError("give at least one flite voice")
    sources = list(islice(read_cuts(source, out), max_utts))
    skipped: Counter = Counter()
    cuts = []
    with tqdm(total=len(sources) * len(voices), unit="utt", desc="flite xengine") as bar:
        for voice in voices:
            (out / "audio" / "xengine" / voice).mkdir(parents=True, exist_ok=True)
            for cut in sources:
                bar.update(1)
                text = cut_text(cut)
                if not text:
                    skipped["no_text"] += 1
                    continue
                try:
                    samples = render(text, voice)
                except (RuntimeError, subprocess.TimeoutExpired) as err:
                    skipped["render_failed"] += 1
                    tqdm.write(f"xengine: skipped {cut.id} ({voice}): {err}")
                    continue
                cut_id = f"xengine-{voice}-{cut.id}"
                rel_path = f"audio/xengine/{voice}/{cut.id}.flac"
                sf.write(out / rel_path, samples, SAMPLE_RATE, format="FLAC", subtype="PCM_16")
                meta = corpus.UtteranceMeta(cut_id, rel_path, text, f"flite-{voice}", 0, 0, len(samples))
                new = corpus.to_cut(meta)
                new.custom = {"engine": "flite", "voice": voice, "speaker": f"flite-{voice}", "source_cut": cut.id}
                cuts.append(new)
    cutset = CutSet.from_cuts(cuts)
    write_cuts(cutset, out / xengine_file(source_split))
    return XengineResult(cutset, skipped)

