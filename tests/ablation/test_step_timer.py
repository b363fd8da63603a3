"""StepTimer writes one line per training step; read_step_stats skips lines cut off mid-write."""

from pathlib import Path

import lightning.pytorch as pl
import torch

from asr.ablation.step_timer import StepTimer, read_step_stats


class _Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return self.lin(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_step_timer_records_every_step_after_a_killed_run(tmp_path: Path) -> None:
    # a killed run left "9" of a line "9,0.123456": this run's lines must not be glued onto it
    (tmp_path / "step_times.csv").write_text("9")
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(16, 4)), batch_size=2)
    trainer = pl.Trainer(
        max_steps=7, default_root_dir=tmp_path, callbacks=[StepTimer(flush_every=3)], logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )
    trainer.fit(_Tiny(), data)
    lines = (tmp_path / "step_times.csv").read_text().splitlines()
    assert lines[0] == "9" and [int(line.split(",")[0]) for line in lines[1:]] == list(range(1, 8))
    mean, steps = read_step_stats(tmp_path)
    assert steps == 7 and 0 < mean < 1.0


def test_a_line_cut_off_mid_write_is_skipped_not_read_as_a_shorter_time(tmp_path: Path) -> None:
    whole = "1,0.500000\n2,0.500000\n3,0.500000\n4,2.000000\n5,4.000000\n"
    for cut in ("6,0.", "6,0", "6,", "6", "6,0.12", "6,3.00000", "6,0.1234567,0.500000"):
        (tmp_path / "step_times.csv").write_text(whole + cut + "\n")
        # steps 1-3 are warm-up, so (2 + 4) / 2 over steps 4-5; a cut line read as a step would be step 6
        assert read_step_stats(tmp_path) == (3.0, 5), cut
    (tmp_path / "step_times.csv").write_text("6,0.\n")
    assert read_step_stats(tmp_path) == (None, None)
    assert read_step_stats(tmp_path / "missing") == (None, None)
