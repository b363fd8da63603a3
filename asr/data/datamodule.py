"""Lightning DataModule: Lhotse manifests or Shar shards, duration bucketing, fbank on the fly
or from a feature store (``feature_store``: computed once, see `asr.data.feature_store`).

CMVN is not applied here (the model carries it). Cheap checks (duration bounds,
empty or untokenizable text) run as the sampler draws cuts; audio problems are
found by the workers. Both kinds are skipped, warned about and counted per reason:
see `skip_report()`, which counts distinct cuts.

Memory. With ``lazy=True`` (default) the training manifest is parsed line by line
as the sampler streams it, so memory does not grow with the corpus; the sampler
draws exactly the same batches as from an eagerly loaded manifest, since Lhotse's
dynamic samplers stream either kind the same way. ``shar_dir`` reads Lhotse Shar
shards instead (`asr.data.shar`): each rank its own shards, reshuffled per epoch.
``curriculum_cuts`` trains the first ``curriculum_epochs`` epochs on another manifest
(`asr.data.curriculum`: a rooms corpus's clean copies first); with ``curriculum_mix`` the later
epochs read both manifests.
Dev and test splits are small and are held in memory.

Resume. `state_dict()` records where the current epoch stands (`asr.data.loader`);
Lightning stores it in every checkpoint and hands it back to `load_state_dict()`
before the loaders are built, so a resumed run continues the epoch with exactly the
batches it had not trained on, augmented as the interrupted run would have augmented them (each
cut's draws are seeded from the seed, the epoch and its id: `asr.data.augment.cut_draws`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import warnings
from collections.abc import Mapping
from itertools import islice
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.accelerators import CUDAAccelerator
from lhotse import CutSet
from lhotse.dataset import DynamicBucketingSampler, DynamicCutSampler
from lhotse.dataset.sampling.dynamic_bucketing import estimate_duration_buckets
from torch.utils.data import DataLoader

from asr.data.augment import SpecAugment
from asr.data.background import BackgroundMix
from asr.data.buckets import BucketPadded, check_buckets
from asr.data.curriculum import CurriculumSampler, EpochShare, check_curriculum, mixed_cuts
from asr.data.cut_filter import CutFilter, has_content
from asr.data.cut_plan import DrawnLengthConstraint, DrawnLengths
from asr.data.dataset import AsrDataset, check_lead_in, check_spec_augment_from_epoch, new_skip_registry
from asr.data.feature_store import ensure_store, read_store, store_is_current, store_key
from asr.data.features import FbankExtractor, FeatureConfig, training_backend
from asr.data.loader import ResumableSampler, SkipCountingLoader, TrainPosition
from asr.data.manifest import CorpusStats, manifest_stats, read_cuts
from asr.data.shar import RankShardedShar, shar_stats
from asr.data.tokenizer import load_tokenizer

log = logging.getLogger(__name__)
_BINS_ESTIMATE_CUTS = 10_000  # Lhotse's default: cuts read to place the bucket boundaries


@contextlib.contextmanager
def _quiet_eager_warning():
    """Lhotse warns about eager CutSets; dev/test (and lazy=False train) are held in memory on purpose."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*eagerly read CutSet.*")
        yield


class AsrDataModule(L.LightningDataModule):
    def __init__(
        self,
        data_dir: str,
        tokenizer_path: str,
        train_cuts: str = "cuts_train.jsonl.gz",
        dev_cuts: str = "cuts_dev.jsonl.gz",
        test_cuts: str = "cuts_test.jsonl.gz",
        max_duration: float = 200.0,
        num_buckets: int = 10,
        num_workers: int = 2,
        speed_perturb: bool = True,
        spec_augment: bool = True,
        noise_cuts: str | None = None,
        lead_in_prob: float = 0.0,
        lead_in_max_s: float = 0.0,
        lead_in_from_epoch: int = 0,
        spec_augment_from_epoch: int = 0,
        background: Mapping[str, Any] | BackgroundMix | None = None,
        seed: int = 0,
        min_duration: float = 0.3,
        max_duration_per_utt: float = 20.0,
        lazy: bool = True,
        shar_dir: str | None = None,
        bucket_buffer_size: int = 20_000,
        cmvn_file: str = "cmvn.json",
        features: FeatureConfig | dict | None = None,
        feature_store: str | None = None,
        world_size: int | None = None,
        rank: int | None = None,
        frame_buckets: list[int] | None = None,
        token_multiple: int = 1,
        curriculum_cuts: str | None = None,
        curriculum_epochs: int = 0,
        curriculum_mix: bool = False,
        curriculum_mix_train_share: float = 1.0,
        batch_by_drawn_length: bool = False,
    ) -> None:
        super().__init__()
        if max_duration_per_utt > max_duration:
            raise ValueError(
                f"max_duration_per_utt ({max_duration_per_utt}) exceeds the batch max_duration ({max_duration})"
            )
        if min_duration < 0 or min_duration >= max_duration_per_utt:
            raise ValueError(f"need 0 <= min_duration ({min_duration}) < max_duration_per_utt "
                             f"({max_duration_per_utt})")
        check_lead_in(lead_in_prob, lead_in_max_s, lead_in_from_epoch)  # here, before a run starts
        check_spec_augment_from_epoch(spec_augment_from_epoch)
        if bucket_buffer_size < 1:
            raise ValueError(f"bucket_buffer_size ({bucket_buffer_size}) must be >= 1")
        if feature_store and shar_dir:
            raise ValueError("feature_store reads manifests; with shar_dir, train from the shards' audio "
                             "(feature_store=null)")
        check_curriculum(curriculum_cuts, curriculum_epochs, shar=bool(shar_dir), mix=curriculum_mix,
                         mix_train_share=curriculum_mix_train_share)
        self.data_dir = Path(data_dir)
        self.curriculum_cuts, self.curriculum_epochs = curriculum_cuts, curriculum_epochs
        self.curriculum_mix, self.curriculum_mix_train_share = curriculum_mix, curriculum_mix_train_share
        if curriculum_cuts is not None and not self._manifest_path(curriculum_cuts).is_file():
            raise FileNotFoundError(
                f"curriculum_cuts: {self._manifest_path(curriculum_cuts)} is missing (a clean-copy profile such as "
                f"neural_hibari_capture30_rooms_curriculum writes it: scripts/prepare_data.py --profile ...)")
        self.train_cuts, self.dev_cuts, self.test_cuts = train_cuts, dev_cuts, test_cuts
        self.background = BackgroundMix.from_dict(background)
        if self.background.enabled and self.background.noise_cuts is not None:
            if not self._resolve(self.background.noise_cuts).is_file():
                raise FileNotFoundError(
                    f"data.background.noise_cuts: {self._resolve(self.background.noise_cuts)} is missing (scripts/"
                    f"prepare_data.py writes cuts_noise_bank.jsonl.gz into a synth corpus; or null: talkers only)")
        self.max_duration, self.num_buckets, self.num_workers = max_duration, num_buckets, num_workers
        self.speed_perturb, self.spec_augment, self.noise_cuts = speed_perturb, spec_augment, noise_cuts
        self.lead_in_prob, self.lead_in_max_s = lead_in_prob, lead_in_max_s
        self.lead_in_from_epoch = lead_in_from_epoch
        self.spec_augment_from_epoch = spec_augment_from_epoch
        self.seed = seed
        self.min_duration, self.max_duration_per_utt = min_duration, max_duration_per_utt
        self.lazy, self.bucket_buffer_size = lazy, bucket_buffer_size
        # Bucket and cap training batches by each row's length after the epoch's draws (lead-ins, speed,
        # background lead-ins: asr.data.cut_plan) instead of the cuts' durations.
        self.batch_by_drawn_length = batch_by_drawn_length
        self.shar_dir = self._resolve(shar_dir) if shar_dir else None
        self.feature_store = Path(feature_store) if feature_store else None
        self._world_size, self._rank = world_size, rank
        # Training batches padded to a few lengths (asr.data.buckets): a compiled step meets a few shapes.
        self.frame_buckets = check_buckets(frame_buckets, token_multiple) if frame_buckets else None
        self.token_multiple = token_multiple
        tok = Path(tokenizer_path)
        if not tok.exists() and not tok.is_absolute() and (self.data_dir / tok).exists():
            tok = self.data_dir / tok
        self.tokenizer = load_tokenizer(tok)
        # The run's ``features`` group (train.py passes it; None: LEGACY). CMVN stats must have been
        # computed with the same options: see asr.train.run.cmvn_for_features.
        self.features = features if isinstance(features, FeatureConfig) else FeatureConfig.from_dict(features)
        self.extractor = FbankExtractor(self.features, backend=training_backend(self.features))
        self.cmvn_path = Path(cmvn_file) if Path(cmvn_file).is_absolute() else self.data_dir / cmvn_file
        self._skipped = new_skip_registry()
        self._eval_cache: dict[str, CutSet] = {}
        self._train_loaders: list[SkipCountingLoader] = []
        self._resume_position: TrainPosition | None = None

    # --- distributed layout -------------------------------------------------------------
    def _dist(self) -> tuple[int, int]:
        """(world_size, rank): constructor overrides, else the attached trainer, else one process."""
        trainer = self.trainer
        world = self._world_size if self._world_size is not None else (trainer.world_size if trainer else 1)
        rank = self._rank if self._rank is not None else (trainer.global_rank if trainer else 0)
        return world, rank

    # --- manifests ----------------------------------------------------------------------
    def _skip(self, reason: str, cut_id: str, detail: str) -> None:
        if cut_id not in self._skipped[reason]:  # a lazy pass sees the same bad cut every epoch
            log.warning("skipping cut %s: %s", cut_id, detail)
        self._skipped[reason].add(cut_id)

    def _filter(self, filter_durations: bool) -> CutFilter:
        if filter_durations:
            return CutFilter(self.tokenizer, self._skip, self.min_duration, self.max_duration_per_utt)
        return CutFilter(self.tokenizer, self._skip)

    def _manifest_path(self, cuts_file: str) -> Path:
        path = Path(cuts_file)
        return path if path.is_absolute() or path.exists() else self.data_dir / cuts_file

    # --- stored features -----------------------------------------------------------------
    def _store_dir(self, cuts_file: str) -> Path:
        return self.feature_store / Path(cuts_file).name.split(".")[0]

    def _stored_splits(self) -> list[str]:
        """The manifests read from the feature store: train, the curriculum's and dev (the ones read every epoch)."""
        if self.feature_store is None:
            return []
        return [self.train_cuts, *([self.curriculum_cuts] if self.curriculum_cuts else []), self.dev_cuts]

    def prepare_data(self) -> None:
        """Build (once, on the first process of each node) the feature store of train and dev."""
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        for cuts_file in self._stored_splits():
            ensure_store(self._manifest_path(cuts_file), self._store_dir(cuts_file), self.extractor, workers)

    def _read_split(self, cuts_file: str, lazy: bool = False) -> tuple[CutSet, Path]:
        """(cuts, path): from the feature store when it holds this split, else the manifest."""
        path = self._manifest_path(cuts_file)
        if cuts_file in self._stored_splits():
            store = self._store_dir(cuts_file)
            if not store_is_current(store, store_key(path, self.extractor)):
                self.prepare_data()  # not called by Lightning here (a test, a script): build now
            return read_store(store, lazy=lazy), store
        return read_cuts(path, lazy=lazy), path  # relative audio paths resolve against the manifest's folder

    def stored_train_cuts(self) -> CutSet | None:
        """The training manifest's cuts with their stored fbank, lazy (the store is built first, as training
        builds it, when it is not current); None without a feature store."""
        if self.train_cuts not in self._stored_splits():
            return None
        return self._read_split(self.train_cuts, lazy=True)[0]

    def _eval_cuts(self, cuts_file: str) -> CutSet:
        """A small split in memory, text-checked (no duration filter)."""
        if cuts_file not in self._eval_cache:
            cuts, path = self._read_split(cuts_file)
            self._eval_cache[cuts_file] = self._require_usable(cuts.filter(self._filter(False)).to_eager(), path)
        return self._eval_cache[cuts_file]

    def _train_source(self, cuts_file: str | None = None) -> tuple[CutSet, RankShardedShar | None]:
        """The training cuts after the checks: lazy, eager, or this rank's Shar shards; ``cuts_file``
        (default: train_cuts) names another manifest (the curriculum's)."""
        keep = self._filter(filter_durations=True)
        if self.shar_dir is not None:
            world, rank = self._dist()
            shar = RankShardedShar(self.shar_dir, self.seed, world, rank)
            return CutSet(shar).filter(keep), shar
        cuts, path = self._read_split(cuts_file or self.train_cuts, lazy=self.lazy)
        cuts = cuts.filter(keep)
        return (cuts if self.lazy else self._require_usable(cuts.to_eager(), path)), None

    def _require_usable(self, cuts: CutSet, source) -> CutSet:
        """Raise when the (filtered) cuts are empty; a lazy set is probed up to its first cut."""
        if next(iter(cuts), None) is None:
            raise ValueError(f"{source}: no usable cuts (skips: {self.skip_report()})")
        return cuts

    def _has_content(self, ids: list[int]) -> bool:
        return has_content(self.tokenizer, ids)

    def setup(self, stage: str | None = None) -> None:
        if stage in (None, "fit"):
            cuts, _ = self._train_source()
            self._require_usable(cuts, self.shar_dir or self.train_cuts)
            if self.curriculum_cuts is not None:
                self._require_usable(self._train_source(self.curriculum_cuts)[0], self.curriculum_cuts)
        if stage in (None, "fit", "validate"):
            self._eval_cuts(self.dev_cuts)

    # --- loaders ------------------------------------------------------------------------
    def _pin_memory(self) -> bool:
        """Pinned host memory when training on a CUDA device: the copy to it can overlap the step."""
        trainer = self.trainer
        return trainer is not None and isinstance(trainer.accelerator, CUDAAccelerator)

    def _loader(self, dataset, sampler, stop_with_first_rank: bool = False) -> SkipCountingLoader:
        loader = DataLoader(
            dataset, sampler=sampler, batch_size=None, num_workers=self.num_workers, pin_memory=self._pin_memory(),
            # workers start anew each epoch from the dataset, so what its set_epoch set reaches them
            persistent_workers=False,
        )
        return SkipCountingLoader(loader, self._skipped, world_size=self._dist()[0],
                                  stop_with_first_rank=stop_with_first_rank)

    def _train_sampler(self, cuts: CutSet, shar: RankShardedShar | None, lengths: DrawnLengths | None = None,
                       first_epoch: int = 0):
        """Duration-bucketed batches; Shar ranks hold disjoint shards, so their sampler is not sharded again.
        ``lengths``: bucket and cap by the planned lengths (``asr.data.cut_plan``) instead of the durations; the
        bucket bounds are then placed on the lengths of ``first_epoch``, the first one this sampler serves."""
        if lengths is not None:
            lengths.set_epoch(first_epoch)
        limits = (dict(constraint=DrawnLengthConstraint(max_duration=self.max_duration, lengths=lengths))
                  if lengths is not None else dict(max_duration=self.max_duration))
        world, rank = self._dist()
        if shar is not None:
            world, rank = 1, 0
        if shar is not None:  # bucket bounds from the cut shards only: the sampler would read the audio tars
            head = [c for c in islice(shar.cuts_without_audio(), _BINS_ESTIMATE_CUTS)
                    if self.min_duration <= c.duration <= self.max_duration_per_utt]
        else:
            head = list(islice(cuts, self.num_buckets))
        if len(head) < self.num_buckets:  # Lhotse cannot estimate more buckets than cuts
            log.warning("only %d train cuts for %d buckets: sampling without bucketing", len(head), self.num_buckets)
            return DynamicCutSampler(
                cuts, **limits, shuffle=True, drop_last=False, seed=self.seed, world_size=world, rank=rank,
            )
        bins = (estimate_duration_buckets(head, num_buckets=self.num_buckets, constraint=limits.get("constraint"))
                if shar is not None else None)
        return DynamicBucketingSampler(
            cuts, **limits, num_buckets=self.num_buckets, shuffle=True,
            drop_last=False, seed=self.seed, world_size=world, rank=rank, duration_bins=bins,
            buffer_size=self.bucket_buffer_size,
        )

    def train_dataloader(self) -> SkipCountingLoader:
        cuts, shar = self._train_source()
        noise = read_cuts(self._resolve(self.noise_cuts)) if self.noise_cuts else None
        background_noise = (read_cuts(self._resolve(self.background.noise_cuts))
                            if self.background.enabled and self.background.noise_cuts else None)
        dataset = AsrDataset(
            self.tokenizer, self.extractor, speed_perturb=self.speed_perturb,
            spec_augment=SpecAugment() if self.spec_augment else None, noise_cuts=noise,
            lead_in_prob=self.lead_in_prob, lead_in_max_s=self.lead_in_max_s,
            lead_in_from_epoch=self.lead_in_from_epoch, background=self.background,
            background_noise_cuts=background_noise, seed=self.seed,
            spec_augment_from_epoch=self.spec_augment_from_epoch,
        )
        # the sampler's own copy of the dataset's draws, moved to each epoch as it starts
        lengths = DrawnLengths(dataset.planner) if self.batch_by_drawn_length else None
        with _quiet_eager_warning():
            first_cuts = self._train_source(self.curriculum_cuts)[0] if self.curriculum_cuts is not None else None
            later_cuts, share = cuts, EpochShare(self.curriculum_mix_train_share, self.seed)
            if self.curriculum_mix:
                main_size, first_size = (manifest_stats(self._manifest_path(name)).cuts
                                         for name in (self.train_cuts, self.curriculum_cuts))
                later_cuts = mixed_cuts(share.thin(cuts), first_cuts, (round(main_size * share.share), first_size),
                                        self.seed)
            first_epochs = self.curriculum_epochs if first_cuts is not None else 0
            sampler = self._train_sampler(later_cuts, shar, lengths, first_epoch=first_epochs)
            if first_cuts is not None:
                sampler = CurriculumSampler(self._train_sampler(first_cuts, None, lengths), sampler,
                                            self.curriculum_epochs)
        listeners = [dataset.set_epoch] + ([share.set_epoch] if self.curriculum_mix else [])
        listeners += [shar.set_epoch] if shar is not None else []
        listeners += [lengths.set_epoch] if lengths is not None else []
        source = dataset if self.frame_buckets is None else BucketPadded(dataset, self.frame_buckets, self.token_multiple)
        loader = self._loader(source, ResumableSampler(sampler, listeners), stop_with_first_rank=shar is not None)
        if self._resume_position is not None:
            # Lightning starts iterating (prefetching) a resumed run's loader before its
            # set_epoch call, so the sampler must already be in the interrupted epoch
            loader.sampler.set_epoch(self._resume_position.epoch)
            loader.resume_at(self._resume_position)
            self._resume_position = None
        self._train_loaders.append(loader)
        return loader

    def eval_dataloader(self, cuts_file: str) -> SkipCountingLoader:
        """Any manifest, no augmentation, manifest order (sharded by rank under DDP)."""
        cuts = self._eval_cuts(cuts_file)
        world, rank = self._dist()
        with _quiet_eager_warning():
            sampler = DynamicCutSampler(
                cuts, max_duration=self.max_duration, shuffle=False, drop_last=False, world_size=world, rank=rank,
            )
        return self._loader(AsrDataset(self.tokenizer, self.extractor), sampler)

    def val_dataloader(self) -> SkipCountingLoader:
        return self.eval_dataloader(self.dev_cuts)

    def test_dataloader(self, split_name: str = "test") -> SkipCountingLoader:
        """`test` uses `test_cuts`; any other split name reads `cuts_<split_name>.jsonl.gz`."""
        return self.eval_dataloader(self.test_cuts if split_name == "test" else f"cuts_{split_name}.jsonl.gz")

    def _resolve(self, name: str) -> Path:
        path = Path(name)
        return path if path.is_absolute() or path.exists() else self.data_dir / name

    # --- resume -------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Where this rank's training epoch stands (saved by Lightning in every checkpoint)."""
        trainer = self.trainer
        if trainer is None or not self._train_loaders:
            return {}
        trained = trainer.fit_loop.epoch_loop.batch_progress.current.processed
        world, _ = self._dist()
        position = self._train_loaders[-1].position_after(trained)
        return {"train_position": position.to_dict(), "world_size": world, "seed": self.seed}

    def load_state_dict(self, state_dict: dict) -> None:
        if "train_position" not in state_dict:
            return
        world, _ = self._dist()
        saved = (state_dict["world_size"], state_dict["seed"])
        if saved != (world, self.seed):
            log.warning("checkpoint data position was saved with (world_size, seed) = %s, this run has %s: "
                        "the interrupted epoch restarts from its first batch", saved, (world, self.seed))
            return
        self._resume_position = TrainPosition.from_dict(state_dict["train_position"])

    # --- reports ------------------------------------------------------------------------
    def train_stats(self) -> CorpusStats | None:
        """Size of the training data before the checks (None for Shar without a stats file)."""
        if self.shar_dir is not None:
            return shar_stats(self.shar_dir)
        return manifest_stats(self._manifest_path(self.train_cuts))

    def estimated_batches_per_epoch(self, epoch: int = 0) -> int | None:
        """Training batches of ``epoch`` per rank, about: the epoch's audio duration / max_duration / world
        size. A curriculum's first epochs read its manifest; mixed later epochs read both manifests, the
        train manifest thinned to its share."""
        stats = self.train_stats()
        if stats is None or stats.cuts == 0:
            return None
        seconds = stats.seconds
        if self.curriculum_cuts is not None:
            first_seconds = manifest_stats(self._manifest_path(self.curriculum_cuts)).seconds
            if epoch < self.curriculum_epochs:
                seconds = first_seconds
            elif self.curriculum_mix:
                seconds = seconds * self.curriculum_mix_train_share + first_seconds
        return max(1, math.ceil(seconds / self.max_duration / self._dist()[0]))

    def read_summary(self) -> dict[str, float]:
        """Cuts and hours of audio the training loaders delivered on this rank so far."""
        return {
            "cuts": sum(loader.cuts_read for loader in self._train_loaders),
            "hours": sum(loader.seconds_read for loader in self._train_loaders) / 3600,
        }

    def skip_report(self) -> dict[str, int]:
        """reason -> number of distinct cuts skipped so far (up-front checks and workers)."""
        return {reason: len(ids) for reason, ids in sorted(self._skipped.items()) if ids}
