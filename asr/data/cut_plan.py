"""What an epoch does to one cut, drawn before its audio is read: speed, noise, lead-in, background.

Why: the dataset lengthens utterances after the sampler has batched them. A silent lead-in (up to a
second) or a background playing alone before the speaker makes a row longer than the duration the
sampler saw, so a batch of 25 short sentences, bucketed to within a few frames of each other, is padded
to its longest row plus its lead-in: in the quickstart's room epochs a quarter more frames per step,
computed and thrown away. Every one of these draws is a pure function of (seed, epoch, cut id)
(``asr.data.augment.cut_draws``), so the sampler can know each row's length before the dataset makes it.
:class:`CutPlanner` makes the draws, in one order, for both: the dataset builds its features from the
plan, and :class:`DrawnLengthConstraint` buckets and caps batches by the planned length
(``data.batch_by_drawn_length``): rows of like length, ``max_duration`` counting the padded batch the
model computes rather than the audio before the lead-ins (Lhotse closes a batch once one more of its longest
row would pass the cap, so the row that closes it may pass it, as with durations).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from lhotse.dataset.sampling.base import TimeConstraint

from asr.data.augment import cut_draws, random_speed
from asr.data.background import BackgroundMix
from asr.data.features import FRAME_SHIFT_S


@dataclass(frozen=True)
class BackgroundDraw:
    """One utterance's background: which source, at what SNR, starting how far ahead of the speech."""

    talker_draw: float  # below the mix's talker_share: another utterance of the batch, else a noise clip
    pick: float  # in [0, 1): which talker or clip
    snr_db: float
    lead_in_frames: int  # the background alone before the speech (0..background lead-in frames)
    start: int  # the frame of the source it starts from (looped)


@dataclass(frozen=True)
class CutPlan:
    """One cut's draws in one epoch."""

    speed: float  # 1.0: none
    noise_index: int | None  # the noise clip mixed into the waveform (index into the noise cuts), None: clean
    noise_snr_db: float | None
    lead_in_frames: int  # silent frames before the speech (0: none)
    background: BackgroundDraw | None  # None: no background

    def frames_added(self) -> int:
        """Frames the dataset puts before the speech (a background's are counted even where a batch has no
        source for it and leaves it out)."""
        return self.lead_in_frames + (self.background.lead_in_frames if self.background else 0)


@dataclass(frozen=True)
class CutPlanner:
    """The dataset's augmentation settings, as far as they draw (see ``asr.data.dataset.AsrDataset``)."""

    seed: int = 0
    speed_perturb: bool = False
    noise_count: int = 0  # clips in the waveform noise manifest
    noise_prob: float = 0.5
    snr_range_db: tuple[float, float] = (10.0, 20.0)
    lead_in_prob: float = 0.0
    lead_in_frames: int = 0  # the longest lead-in
    lead_in_from_epoch: int = 0
    background: BackgroundMix = BackgroundMix()

    @property
    def background_lead_in_frames(self) -> int:
        return round(self.background.lead_in_max_s / FRAME_SHIFT_S)

    def draw(self, py: random.Random, epoch: int) -> CutPlan:
        """The plan from a cut's python generator (``cut_draws(...).py``), drawn in a fixed order: speed, noise
        (whether, which clip, SNR), lead-in (whether, length), background (whether, source, SNR, lead-in, start
        frame). A draw is made only where its setting is on, so a run without one draws the rest as before."""
        speed = random_speed(py) if self.speed_perturb else 1.0
        noise_index = noise_snr = None
        if self.noise_count and py.random() < self.noise_prob:
            noise_index = py.choice(range(self.noise_count))  # random.choice of a list of that length
            noise_snr = py.uniform(*self.snr_range_db)
        lead_in = 0
        if epoch >= self.lead_in_from_epoch and self.lead_in_frames >= 1 and py.random() < self.lead_in_prob:
            lead_in = py.randint(1, self.lead_in_frames)
        background = None
        mix = self.background
        if mix.enabled and epoch >= mix.from_epoch and py.random() < mix.prob:
            talker_draw, pick, snr_db = py.random(), py.random(), py.uniform(*mix.snr_db)
            background = BackgroundDraw(talker_draw, pick, snr_db, py.randint(0, self.background_lead_in_frames),
                                        py.randrange(1 << 30))
        return CutPlan(speed, noise_index, noise_snr, lead_in, background)

    def plan(self, cut_id: str, epoch: int) -> CutPlan:
        return self.draw(cut_draws(self.seed, epoch, cut_id).py, epoch)

    def length_s(self, cut, epoch: int) -> float:
        """Seconds of features the dataset makes of ``cut`` in ``epoch``: its audio at the drawn speed and the
        frames put before it."""
        plan = self.plan(cut.id, epoch)
        return cut.duration / plan.speed + plan.frames_added() * FRAME_SHIFT_S


class DrawnLengths:
    """A :class:`CutPlanner` at the epoch being sampled: the sampler's side of the plan (an epoch listener of
    ``asr.data.loader.ResumableSampler`` moves it)."""

    def __init__(self, planner: CutPlanner, epoch: int = 0) -> None:
        self.planner, self.epoch = planner, epoch

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __call__(self, cut) -> float:
        return self.planner.length_s(cut, self.epoch)


@dataclass
class DrawnLengthConstraint(TimeConstraint):
    """Lhotse's duration constraint on the planned lengths (:class:`DrawnLengths`) instead of the cuts'
    durations: the bucket a cut goes to, and ``max_duration`` as the batch's rows times its longest row,
    count the lead-ins and the speed the dataset will give it. Copies (one per batch) share the lengths."""

    lengths: DrawnLengths | None = None

    def measure_length(self, example) -> float:
        return self.lengths(example)

    def add(self, example) -> None:
        if self.max_duration is not None:
            length = self._maybe_apply_quadratic_correction(self.measure_length(example))
            self.current += length
            self.longest_seen = max(self.longest_seen, length)
        self.num_cuts += 1
