"""Map-style dataset over Lhotse cut batches: audio -> augmentation -> fbank -> Batch
(or stored fbank -> SpecAugment -> Batch for cuts from a feature store).

A Lhotse sampler hands `__getitem__` a whole CutSet (one batch). Bad items are
dropped from the batch, not raised: the batch comes back with the list of
(reason, cut id) it skipped, and `asr.data.loader.SkipCountingLoader` (main
process) strips that list and accumulates it, because counters inside worker
processes never reach the trainer. An unreadable noise file drops nothing: that speech cut is kept
without noise and the noise cut is listed under ``noise_<reason>``.
"""

from __future__ import annotations

import logging
from collections import defaultdict

import torch
from lhotse import CutSet

from asr.data.audio import AudioError, cut_waveform
from asr.data.augment import SpecAugment, cut_draws, mix_noise, speed_perturb
from asr.data.background import BackgroundMix, loop_to, mix_log_mel
from asr.data.batch import Batch
from asr.data.cut_plan import CutPlan, CutPlanner
from asr.data.feature_store import load_stored
from asr.data.features import FRAME_SHIFT_S, FbankExtractor

log = logging.getLogger(__name__)
Skipped = list[tuple[str, str]]  # (reason, cut id)


def check_lead_in(prob: float, max_s: float, from_epoch: int) -> None:
    """The lead-in settings (:meth:`AsrDataset.with_lead_in`), or a ValueError naming them."""
    if not 0.0 <= prob <= 1.0 or max_s < 0 or from_epoch < 0:
        raise ValueError(f"lead_in_prob ({prob}) must be in [0, 1], lead_in_max_s ({max_s}) >= 0 and "
                         f"lead_in_from_epoch ({from_epoch}) >= 0")


def check_spec_augment_from_epoch(from_epoch: int) -> None:
    """The epoch SpecAugment's masks start at, or a ValueError naming it."""
    if from_epoch < 0:
        raise ValueError(f"spec_augment_from_epoch ({from_epoch}) must be >= 0.")


class AsrDataset(torch.utils.data.Dataset):
    """CutSet -> (Batch, skipped, seconds read). Token ids come from `tokenizer.encode` of
    the cut's text (the data module has already dropped cuts whose text has no content).

    Augmentation draws come from each cut's own generators, seeded from ``seed``, the epoch
    (:meth:`set_epoch`) and the cut's id (``asr.data.augment.cut_draws``): :attr:`planner` draws speed,
    noise, lead-in and background before anything is read (``asr.data.cut_plan``), so a sampler can
    know each row's length; SpecAugment draws from the cut's torch generator."""

    def __init__(
        self,
        tokenizer,
        extractor: FbankExtractor,
        speed_perturb: bool = False,
        spec_augment: SpecAugment | None = None,
        noise_cuts: CutSet | None = None,
        noise_prob: float = 0.5,
        snr_range_db: tuple[float, float] = (10.0, 20.0),
        lead_in_prob: float = 0.0,
        lead_in_max_s: float = 0.0,
        lead_in_from_epoch: int = 0,
        background: BackgroundMix | None = None,
        background_noise_cuts: CutSet | None = None,
        seed: int = 0,
        spec_augment_from_epoch: int = 0,
    ) -> None:
        check_lead_in(lead_in_prob, lead_in_max_s, lead_in_from_epoch)
        check_spec_augment_from_epoch(spec_augment_from_epoch)
        self.tokenizer = tokenizer
        self.extractor = extractor
        self.spec_augment = spec_augment
        # masks only from this epoch on: CTC from scratch aligns far later under them (data/results/robust.md)
        self.spec_augment_from_epoch = spec_augment_from_epoch
        self.noise_cuts = list(noise_cuts) if noise_cuts is not None else []
        self.background = background if background is not None else BackgroundMix()
        self.background_noise_cuts = list(background_noise_cuts) if background_noise_cuts is not None else []
        # every draw that decides what a row holds and how long it is (the seed included)
        self.planner = CutPlanner(seed, speed_perturb, len(self.noise_cuts), noise_prob, snr_range_db, lead_in_prob,
                                  round(lead_in_max_s / FRAME_SHIFT_S), lead_in_from_epoch, self.background)
        self._background_noise: dict[str, torch.Tensor | None] = {}  # noise cut id -> (S, F), None: unusable
        self.epoch = 0
        self._silence: torch.Tensor | None = None  # (F,) the frontend's frame of digital silence

    def _feats(self, cut, plan: CutPlan, skipped: Skipped) -> torch.Tensor | None:
        """(T, F) features of one cut, or None (skipped, reason recorded) when its audio is too short.

        A cut from a feature store (``asr.data.feature_store``) is read from there unless this
        draw changes its waveform (a speed other than 1.0, or noise): those go the on-the-fly way.
        """
        if cut.has_features and plan.speed == 1.0 and plan.noise_index is None:
            return load_stored(cut)
        wav = self._waveform(cut, plan, skipped)
        if wav.numel() < self.extractor.min_samples:
            log.warning("skipping cut %s: %d samples, the frontend needs %d", cut.id, wav.numel(),
                        self.extractor.min_samples)
            skipped.append(("audio_too_short", cut.id))
            return None
        return self.extractor(wav)  # (T, F)

    def _waveform(self, cut, plan: CutPlan, skipped: Skipped) -> torch.Tensor:
        """(n,) the cut's audio at the planned speed, mixed with the planned noise clip (if any)."""
        wav = cut_waveform(cut)  # (n,)
        if plan.speed != 1.0:
            wav = speed_perturb(wav, plan.speed)
        if plan.noise_index is not None:
            noise_cut = self.noise_cuts[plan.noise_index]
            try:
                noise = cut_waveform(noise_cut)
            except AudioError as err:
                # the fault is the noise file's: the speech trains clean and the noise cut is counted
                log.warning("noise cut %s unusable, cut %s gets no noise: %s", noise_cut.id, cut.id, err)
                skipped.append((f"noise_{err.reason}", noise_cut.id))
            else:
                wav = mix_noise(wav, noise, plan.noise_snr_db)
        return wav

    def silence_frame(self) -> torch.Tensor:
        """(F,) what the frontend makes of exact zeros (a muted microphone, a runtime's padding)."""
        if self._silence is None:
            self._silence = self.extractor(torch.zeros(self.extractor.min_samples))[0]
        return self._silence

    def set_epoch(self, epoch: int) -> None:
        """The training epoch about to be read. The loader's workers start anew each epoch from this
        object, so the value reaches them."""
        self.epoch = epoch

    def with_lead_in(self, f: torch.Tensor, plan: CutPlan) -> torch.Tensor:
        """(T, F) -> (k + T, F): k = ``plan.lead_in_frames`` silent frames before the speech (drawn with
        probability ``lead_in_prob``, uniform in [1, lead_in_max_s]). A trimmed utterance starts its stream
        with speech, and a model trained only on those learns to spend its first token on the stream's first
        frames: after a runtime's zero padding (sherpa-onnx adds 0.5 s) that token lands in the silence, where
        a chunk that also holds the onset sees it, and the word is lost or doubled.

        Before epoch ``lead_in_from_epoch`` no lead-in is drawn: CTC trained from scratch with silence
        before most utterances stays on its all-blank plateau for longer, so a recipe can switch the
        lead-ins on once the model aligns."""
        k = plan.lead_in_frames
        if k == 0:
            return f
        return torch.cat([self.silence_frame().to(f.dtype).expand(k, -1), f])

    def _noise_features(self, noise_cut, skipped: Skipped) -> torch.Tensor | None:
        """(S, F) fbank of a background noise clip, computed once per worker; None when it is unusable
        (listed in ``skipped`` as ``noise_<reason>`` the first time)."""
        if noise_cut.id not in self._background_noise:
            feats = None
            try:
                wav = cut_waveform(noise_cut)
            except AudioError as err:
                log.warning("background noise cut %s unusable: %s", noise_cut.id, err)
                skipped.append((f"noise_{err.reason}", noise_cut.id))
            else:
                if wav.numel() >= self.extractor.min_samples:
                    feats = self.extractor(wav)
                else:
                    skipped.append(("noise_audio_too_short", noise_cut.id))
            self._background_noise[noise_cut.id] = feats
        return self._background_noise[noise_cut.id]

    def with_background(self, f: torch.Tensor, speech_from: int, talkers: list[torch.Tensor], index: int,
                        plan: CutPlan, skipped: Skipped) -> torch.Tensor:
        """(T, F) -> (k + T, F): with probability ``background.prob`` (``plan.background``), a background under
        the utterance at an SNR drawn from ``background.snr_db``, playing alone for k frames (uniform in
        [0, background.lead_in_max_s]) before it, and only there without ``background.under_speech``.
        ``speech_from``: the frames of ``f`` before the speech (a silent lead-in, which the background fills
        too). The background is one of ``talkers`` (the batch's utterances before their lead-ins) other than
        ``index``, or a clip of the noise manifest, looped from a random frame (``asr.data.background``)."""
        drawn = plan.background
        if drawn is None:
            return f
        k = drawn.lead_in_frames
        others = [j for j in range(len(talkers)) if j != index]
        if others and (not self.background_noise_cuts or drawn.talker_draw < self.background.talker_share):
            source = talkers[others[int(drawn.pick * len(others))]]
        elif self.background_noise_cuts:
            clip = self.background_noise_cuts[int(drawn.pick * len(self.background_noise_cuts))]
            source = self._noise_features(clip, skipped)
        else:
            source = None  # a batch of one utterance and no noise manifest
        if source is None:
            return f
        f = torch.cat([self.silence_frame().to(f.dtype).expand(k, -1), f])
        mixed = mix_log_mel(f, loop_to(source.to(f.dtype), f.shape[0], drawn.start), drawn.snr_db, speech_from + k,
                            floor=self.silence_frame())
        if not self.background.under_speech:
            mixed[speech_from + k:] = f[speech_from + k:]  # the background stops where the speech starts
        return mixed

    def __getitem__(self, cuts: CutSet) -> tuple[Batch, Skipped, float]:
        read = []  # (features with their lead-in (T, F), frames of lead-in, plan, draws, cut, text)
        skipped: Skipped = []
        seconds = 0.0
        for cut in cuts:
            draws = cut_draws(self.planner.seed, self.epoch, cut.id)
            plan = self.planner.draw(draws.py, self.epoch)
            try:
                f = self._feats(cut, plan, skipped)  # (T, F)
            except AudioError as err:
                log.warning("skipping cut %s: %s", cut.id, err)
                skipped.append((err.reason, cut.id))
                continue
            if f is None:
                continue
            led = self.with_lead_in(f, plan)
            read.append((led, led.shape[0] - f.shape[0], plan, draws, cut, cut_text(cut)))
            seconds += cut.duration
        talkers = [f[lead:] for f, lead, *_ in read]  # the batch's utterances without their lead-ins
        feats, tokens, keys, texts = [], [], [], []
        for index, (f, lead, plan, draws, cut, text) in enumerate(read):
            f = self.with_background(f, lead, talkers, index, plan, skipped)
            if self.spec_augment is not None and self.epoch >= self.spec_augment_from_epoch:
                f = self.spec_augment(f, draws.torch)  # the row's last draws: skipping them moves no other
            feats.append(f)
            tokens.append(self.tokenizer.encode(text))
            keys.append(cut.id)
            texts.append(text)
        return Batch.collate(feats, tokens, keys, texts, self.extractor.num_mel_bins), skipped, seconds


def cut_text(cut) -> str:
    return " ".join((s.text or "").strip() for s in cut.supervisions).strip()


def new_skip_registry() -> dict[str, set[str]]:
    return defaultdict(set)
