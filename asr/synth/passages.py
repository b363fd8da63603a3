"""Passages for training: several sentences by one voice with natural pauses between them.

Why: a model trained on single sentences (1-10 s, speech from the first sample to the last)
has never heard a pause inside an utterance. On a 5-minute file of test sentences it merged
words across the pauses and read at 56% WER where the same sentences alone read at 26%; the
probe set (passages of 5-160 s) showed 45% at 5 s. A share of the train split made of passages
(2-5 sentences, 5-30 s, pauses of 0.25-1.2 s, up to 2.5 s of silence at either end and a noise
floor under it all) teaches that a pause is neither the end of the utterance nor a word.

The long edges are there for streams: a live stream (a microphone opened before its user
speaks, the next utterance after an endpoint) reaches speech after seconds of silence that
sit in the attention cache and the online CMN's running mean, and a model trained on single
sentences with 0.05-0.6 s edges reads worse after each second of it (data/results/streaming.md).
As a profile (``neural_hibari_capture30_passages`` against the default, same recipe) a share
of 0.1 loses less to a silent lead-in but reads worse everywhere, passages included, at the
quickstart's budget (data/results/long_audio.md), so no passage share is in the default.

A profile turns passages on with its ``passages`` field (:class:`PassageRanges`,
``asr.synth.profiles.SynthProfile``). Whether train utterance ``index`` is a passage is drawn from
its own RNG stream (:func:`is_passage`), so every single-sentence utterance of such a corpus is
the very utterance the corpus without passages has at that index.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from asr.data.features import SAMPLE_RATE
from asr.synth.sentences import sentence_rng


@dataclass(frozen=True)
class PassageRanges:
    """How many train utterances are passages and what a passage looks like.

    share: the chance that a train utterance is a passage (of utterances, not of audio: a
        passage lasts ~4x a sentence, so a share of 0.1 is ~30% of the train audio).
    sentences: (fewest, most) sentences; seconds: (shortest, longest) passage, edges included.
    pause_s: the pause before each sentence but the first; edge_s: silence before and after.
    floor_db: a white noise floor this many dB below the passage's peak lies under all of it, so
        the pauses are not digital zeros (log-mel -15.9 against ~15 for speech); near -90 dB the
        int16 rounding leaves mostly zeros, so both kinds of silence are heard.
    """

    share: float
    sentences: tuple[int, int] = (2, 5)
    seconds: tuple[float, float] = (5.0, 30.0)
    pause_s: tuple[float, float] = (0.25, 1.2)
    edge_s: tuple[float, float] = (0.0, 2.5)
    floor_db: tuple[float, float] = (-90.0, -50.0)

    def __post_init__(self) -> None:
        if not 0.0 <= self.share <= 1.0:
            raise ValueError(f"passage share ({self.share}) must lie in [0, 1]")
        fewest, most = self.sentences
        if not 2 <= fewest <= most:
            raise ValueError(f"passage sentences must be (fewest, most) with 2 <= fewest <= most, got {self.sentences}")
        for name in ("seconds", "pause_s", "edge_s"):
            low, high = getattr(self, name)
            if not 0.0 <= low <= high:
                raise ValueError(f"passage {name} must be (low, high) with 0 <= low <= high, got {(low, high)}")
        if not 2 * self.edge_s[1] < self.seconds[1]:
            raise ValueError(f"passage edges ({self.edge_s}) leave no room under {self.seconds[1]} s")


def is_passage(seed: int, index: int, share: float) -> bool:
    """Whether train utterance ``index`` is a passage: its own RNG stream, not the utterance's."""
    return share > 0.0 and sentence_rng(seed, "train-passage", index).random() < share


def read_passage(rng: random.Random, say: Callable[[str], np.ndarray], draw_text: Callable[[random.Random], str],
                 ranges: PassageRanges) -> tuple[str, np.ndarray] | None:
    """One voice reads ``fewest..most`` sentences with pauses: (text, (n,) int16 at SAMPLE_RATE), or None.

    ``say(text)`` is the voice (one speaker for the whole passage); ``draw_text(rng)`` draws a
    sentence. A sentence that would take the passage past its longest is skipped and another drawn
    (at most 20 skips); None when the passage stays under its shortest after ``most`` sentences.
    """
    fewest, most = ranges.sentences
    low, high = ranges.seconds
    wanted = rng.randint(fewest, most)
    lead, trail = (int(rng.uniform(*ranges.edge_s) * SAMPLE_RATE) for _ in range(2))
    room = int(high * SAMPLE_RATE) - lead - trail  # samples left for sentences and pauses
    texts: list[str] = []
    pieces: list[np.ndarray] = [np.zeros(lead, dtype=np.int16)]
    total, skips = 0, 0
    while len(texts) < most and skips <= 20:
        text = draw_text(rng)
        audio = say(text)
        pause = int(rng.uniform(*ranges.pause_s) * SAMPLE_RATE) if texts else 0
        if total + pause + len(audio) > room:
            skips += 1
            continue
        texts.append(text)
        pieces += [np.zeros(pause, dtype=np.int16), audio]
        total += pause + len(audio)
        if len(texts) >= wanted and (lead + total + trail) / SAMPLE_RATE >= low:
            break
    if len(texts) < fewest or (lead + total + trail) / SAMPLE_RATE < low:
        return None
    pieces.append(np.zeros(trail, dtype=np.int16))
    return " ".join(texts), with_noise_floor(np.concatenate(pieces), rng, ranges.floor_db)


def with_noise_floor(audio: np.ndarray, rng: random.Random, floor_db: tuple[float, float]) -> np.ndarray:
    """(n,) int16 plus white noise ``uniform(floor_db)`` dB below its peak, as (n,) int16."""
    level = rng.uniform(*floor_db)
    # abs of int16 keeps -32768 as is: the peak corpora were built with (changing it changes their bytes)
    peak = max(float(np.max(np.abs(audio))), 1.0)
    noise = np.random.default_rng(rng.getrandbits(63)).standard_normal(audio.size) * peak * 10 ** (level / 20)
    return np.clip(np.round(audio + noise), -32768, 32767).astype(np.int16)
