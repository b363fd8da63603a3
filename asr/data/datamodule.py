"""Lightning DataModule: Lhotse manifests, duration bucketing, on-the-fly fbank.

CMVN is not applied here (the model carries it). Cheap checks happen up front
(duration bounds, empty or untokenizable text); audio problems are found by the
workers. Both kinds are skipped, warned about and counted per reason: see
`skip_report()`, which counts distinct cuts.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from pathlib import Path

import lightning as L
from lhotse import CutSet
from lhotse.dataset import DynamicBucketingSampler, DynamicCutSampler
from torch.utils.data import DataLoader

from asr.data.augment import SpecAugment
from asr.data.dataset import AsrDataset, SkipCountingLoader, cut_text, new_skip_registry
from asr.data.features import FbankExtractor
from asr.data.manifest import read_cuts
from asr.data.tokenizer import SPACE, load_tokenizer

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _quiet_eager_warning():
    """Lhotse warns about eager CutSets; ours are held in memory on purpose (text is validated up front)."""
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
        seed: int = 0,
        min_duration: float = 0.3,
        max_duration_per_utt: float = 20.0,
        world_size: int | None = None,
        rank: int | None = None,
    ) -> None:
        super().__init__()
        if max_duration_per_utt > max_duration:
            raise ValueError(
                f"max_duration_per_utt ({max_duration_per_utt}) exceeds the batch max_duration ({max_duration})"
            )
        if min_duration < 0 or min_duration >= max_duration_per_utt:
            raise ValueError(f"need 0 <= min_duration ({min_duration}) < max_duration_per_utt "
                             f"({max_duration_per_utt})")
        self.data_dir = Path(data_dir)
        self.train_cuts, self.dev_cuts, self.test_cuts = train_cuts, dev_cuts, test_cuts
        self.max_duration, self.num_buckets, self.num_workers = max_duration, num_buckets, num_workers
        self.speed_perturb, self.spec_augment, self.noise_cuts = speed_perturb, spec_augment, noise_cuts
        self.seed = seed
        self.min_duration, self.max_duration_per_utt = min_duration, max_duration_per_utt
        self._world_size, self._rank = world_size, rank
        tok = Path(tokenizer_path)
        if not tok.exists() and not tok.is_absolute() and (self.data_dir / tok).exists():
            tok = self.data_dir / tok
        self.tokenizer = load_tokenizer(tok)
        self.extractor = FbankExtractor()
        self._skipped = new_skip_registry()
        self._cache: dict[tuple[str, bool], tuple[CutSet, dict[str, list[int]]]] = {}

    # --- distributed layout -------------------------------------------------------------
    def _dist(self) -> tuple[int, int]:
        """(world_size, rank): constructor overrides, else the attached trainer, else one process."""
        trainer = self.trainer
        world = self._world_size if self._world_size is not None else (trainer.world_size if trainer else 1)
        rank = self._rank if self._rank is not None else (trainer.global_rank if trainer else 0)
        return world, rank

    # --- manifests ----------------------------------------------------------------------
    def _skip(self, reason: str, cut_id: str, detail: str) -> None:
        log.warning("skipping cut %s: %s", cut_id, detail)
        self._skipped[reason].add(cut_id)

    def _load(self, cuts_file: str, filter_durations: bool) -> tuple[CutSet, dict[str, list[int]]]:
        """Read a manifest, drop (and count) cuts with bad durations or text, tokenize the rest."""
        key = (str(cuts_file), filter_durations)
        if key in self._cache:
            return self._cache[key]
        path = Path(cuts_file)
        if not path.is_absolute() and not path.exists():
            path = self.data_dir / cuts_file
        cuts = read_cuts(path)  # relative audio paths resolve against the manifest's folder
        kept, tokens = [], {}
        for cut in cuts:
            if filter_durations and cut.duration < self.min_duration:
                self._skip("too_short", cut.id, f"{cut.duration:.2f} s < min_duration {self.min_duration}")
                continue
            if filter_durations and cut.duration > self.max_duration_per_utt:
                self._skip("too_long", cut.id, f"{cut.duration:.2f} s > max_duration_per_utt "
                                               f"{self.max_duration_per_utt}")
                continue
            text = cut_text(cut)
            if not text:
                self._skip("empty_text", cut.id, "empty transcript")
                continue
            ids = self.tokenizer.encode(text)
            if not self._has_content(ids):
                self._skip("untokenizable_text", cut.id, f"transcript {text[:40]!r} has no known tokens")
                continue
            kept.append(cut)
            tokens[cut.id] = ids
        if not kept:
            raise ValueError(f"{path}: no usable cuts out of {len(cuts)} (skips: {self.skip_report()})")
        self._cache[key] = (CutSet.from_cuts(kept), tokens)
        return self._cache[key]

    def _has_content(self, ids: list[int]) -> bool:
        """False when every token is <unk> or a bare word boundary ("▁" alone carries no text)."""
        tok = self.tokenizer
        return any(i != tok.unk_id and tok.id_to_piece(i).strip(SPACE) for i in ids)

    def setup(self, stage: str | None = None) -> None:
        if stage in (None, "fit"):
            self._load(self.train_cuts, filter_durations=True)
        if stage in (None, "fit", "validate"):
            self._load(self.dev_cuts, filter_durations=False)

    # --- loaders ------------------------------------------------------------------------
    def _loader(self, dataset: AsrDataset, sampler) -> SkipCountingLoader:
        loader = DataLoader(
            dataset, sampler=sampler, batch_size=None, num_workers=self.num_workers,
            persistent_workers=False,
        )
        return SkipCountingLoader(loader, self._skipped, world_size=self._dist()[0])

    def train_dataloader(self) -> SkipCountingLoader:
        cuts, tokens = self._load(self.train_cuts, filter_durations=True)
        world, rank = self._dist()
        with _quiet_eager_warning():
            if len(cuts) >= self.num_buckets:
                sampler = DynamicBucketingSampler(
                    cuts, max_duration=self.max_duration, num_buckets=self.num_buckets, shuffle=True,
                    drop_last=False, seed=self.seed, world_size=world, rank=rank,
                )
            else:  # Lhotse cannot estimate more buckets than cuts
                log.warning("only %d train cuts for %d buckets: sampling without bucketing", len(cuts),
                            self.num_buckets)
                sampler = DynamicCutSampler(
                    cuts, max_duration=self.max_duration, shuffle=True, drop_last=False, seed=self.seed,
                    world_size=world, rank=rank,
                )
        noise = read_cuts(self._resolve(self.noise_cuts)) if self.noise_cuts else None
        dataset = AsrDataset(
            tokens, self.extractor, speed_perturb=self.speed_perturb,
            spec_augment=SpecAugment() if self.spec_augment else None, noise_cuts=noise,
        )
        return self._loader(dataset, sampler)

    def eval_dataloader(self, cuts_file: str) -> SkipCountingLoader:
        """Any manifest, no augmentation, manifest order (sharded by rank under DDP)."""
        cuts, tokens = self._load(cuts_file, filter_durations=False)
        world, rank = self._dist()
        with _quiet_eager_warning():
            sampler = DynamicCutSampler(
                cuts, max_duration=self.max_duration, shuffle=False, drop_last=False, world_size=world, rank=rank,
            )
        return self._loader(AsrDataset(tokens, self.extractor), sampler)

    def val_dataloader(self) -> SkipCountingLoader:
        return self.eval_dataloader(self.dev_cuts)

    def test_dataloader(self, split_name: str = "test") -> SkipCountingLoader:
        """`test` uses `test_cuts`; any other split name reads `cuts_<split_name>.jsonl.gz`."""
        return self.eval_dataloader(self.test_cuts if split_name == "test" else f"cuts_{split_name}.jsonl.gz")

    def _resolve(self, name: str) -> Path:
        path = Path(name)
        return path if path.is_absolute() or path.exists() else self.data_dir / name

    def skip_report(self) -> dict[str, int]:
        """reason -> number of distinct cuts skipped so far (up-front checks and workers)."""
        return {reason: len(ids) for reason, ids in sorted(self._skipped.items()) if ids}
