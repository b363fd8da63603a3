"""A run with dropout, SpecAugment, speed perturbation and backgrounds, resumed from one of its own mid-run checkpoints
(``ckpt_path``), ends with the weights of the run that was never interrupted, bit for bit.

Every random draw of a training step must then be the same in the resumed run: dropout (torch's global
generator, which the resumed run's sanity validation and newly created loaders would otherwise have moved),
the augmentation drawn in the dataset's worker, and the chunk draws. (test_kill_resume reads its data in
the main process.)
"""

from __future__ import annotations

from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

from asr.train.checkpoint import model_state_dict
from asr.train.run import train

from tiny_corpus import CONF, make_tiny_corpus, tiny_overrides

MAX_STEPS = 10
RESUME_AT = 8  # in the second epoch (6 batches an epoch)


def compose_run(corpus: Path, out: Path, *extra: str):
    overrides = [*tiny_overrides(corpus, out), f"trainer.max_steps={MAX_STEPS}", "trainer.max_epochs=-1",
                 "trainer.val_check_interval=2", "trainer.check_val_every_n_epoch=null",
                 "trainer.limit_val_batches=1", f"optim.scheduler.total_steps={MAX_STEPS}",
                 "callbacks.model_checkpoint.save_top_k=-1", "~callbacks.lr_monitor", "~logger",
                 "model.encoder.dropout=0.2", "model.decoder_dropout=0.2", "data.spec_augment=true",
                 "data.speed_perturb=true", "streaming.random_phase=true", "streaming.onset_edge_prob=0.5",
                 "data.background.prob=0.5", "data.background.from_epoch=0",
                 "data.num_workers=1", *extra]  # a worker: its generators are seeded from the loader's base seed
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=overrides)


def final_weights(run: Path) -> dict[str, torch.Tensor]:
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert checkpoint["global_step"] == MAX_STEPS
    return model_state_dict(checkpoint)


def test_a_run_with_dropout_and_augmentation_resumes_to_the_uninterrupted_weights(tmp_path):
    corpus = make_tiny_corpus(tmp_path / "corpus", n_train=16, n_eval=2)
    assert train(compose_run(corpus, tmp_path / "straight"))["global_step"] == MAX_STEPS
    (middle,) = (tmp_path / "straight" / "checkpoints").glob(f"*-step{RESUME_AT:06d}-*.ckpt")
    assert torch.load(middle, weights_only=True, map_location="cpu")["epoch"] >= 1  # past an epoch boundary

    summary = train(compose_run(corpus, tmp_path / "resumed", f"ckpt_path={middle}"))
    assert summary["resumed_from"] == str(middle) and summary["global_step"] == MAX_STEPS
    straight, resumed = final_weights(tmp_path / "straight"), final_weights(tmp_path / "resumed")
    assert straight.keys() == resumed.keys()
    differ = [name for name, value in straight.items() if not torch.equal(value, resumed[name])]
    assert not differ, f"{len(differ)} of {len(straight)} tensors differ, e.g. {differ[:3]}"


def test_a_cuts_augmentation_depends_on_seed_epoch_and_cut_only(tmp_path):
    """Whatever the global generators hold, whichever batch a cut is read in: the same features; another
    epoch or seed: other draws. (A worker's global generators are seeded from its loader's base seed,
    which a resumed run draws at another moment.)"""
    import random

    from lhotse import CutSet

    from asr.data.augment import SpecAugment
    from asr.data.dataset import AsrDataset
    from asr.data.features import FbankExtractor
    from asr.data.tokenizer import load_tokenizer

    corpus = make_tiny_corpus(tmp_path / "corpus", n_train=3, n_eval=1)
    cuts = CutSet.from_file(corpus / "cuts_train.jsonl.gz").to_eager()

    def read(dataset: AsrDataset, batches: list[list], global_seed: int) -> dict[str, torch.Tensor]:
        torch.manual_seed(global_seed)
        random.seed(global_seed)
        feats = {}
        for batch in batches:
            out, skipped, _ = dataset[CutSet.from_cuts(batch)]
            assert skipped == []
            feats.update({key: out.feats[i, : out.feat_lens[i]] for i, key in enumerate(out.keys)})
        return feats

    def dataset(seed: int, epoch: int = 0) -> AsrDataset:
        made = AsrDataset(load_tokenizer(corpus / "tokenizer"), FbankExtractor(), speed_perturb=True,
                          spec_augment=SpecAugment(), lead_in_prob=0.5, lead_in_max_s=0.2, seed=seed)
        made.set_epoch(epoch)
        return made

    together = read(dataset(7), [list(cuts)], global_seed=0)
    apart = read(dataset(7), [[c] for c in reversed(list(cuts))], global_seed=1)
    assert together.keys() == apart.keys()
    assert all(torch.equal(together[key], apart[key]) for key in together)
    for other in (read(dataset(7, epoch=1), [list(cuts)], 0), read(dataset(8), [list(cuts)], 0)):
        assert any(other[key].shape != together[key].shape or not torch.equal(other[key], together[key])
                   for key in together)
