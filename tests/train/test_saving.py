"""last.ckpt follows every validation, also when no validation enters the top k."""

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from asr.train.saving import TopKAndLastCheckpoint


class PlateauModule(pl.LightningModule):
    """Trains a linear layer; its validation WER never improves after the first."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        (x,) = batch
        return self.layer(x).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.log("val_wer", 0.5)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def train(callback_cls, out, max_steps=8):
    data = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=4)
    callback = callback_cls(dirpath=out, filename="step{step}", monitor="val_wer", mode="min", save_top_k=1,
                            save_last=True)
    trainer = pl.Trainer(max_steps=max_steps, val_check_interval=2, limit_val_batches=1, callbacks=[callback],
                         logger=False, enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(PlateauModule(), data, data)
    return torch.load(out / "last.ckpt", weights_only=False)


def test_last_checkpoint_is_the_last_validation_not_the_last_improvement(tmp_path):
    assert train(TopKAndLastCheckpoint, tmp_path / "ours")["global_step"] == 8
    # Lightning's own callback leaves last.ckpt at the first (and only top-1) validation.
    assert train(ModelCheckpoint, tmp_path / "lightning")["global_step"] == 2


def test_keeps_lightnings_state_key_so_old_checkpoints_resume_with_their_records(tmp_path):
    kwargs = dict(dirpath=tmp_path, monitor="val_wer", mode="min", save_top_k=5, save_last=True)
    assert TopKAndLastCheckpoint(**kwargs).state_key == ModelCheckpoint(**kwargs).state_key
    saved = train(TopKAndLastCheckpoint, tmp_path / "run")
    assert any(name.startswith("ModelCheckpoint{") for name in saved["callbacks"])
