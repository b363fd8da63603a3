"""How much of a recipe's training batches is padding, batched by duration and by drawn length.

A step's cost follows the padded batch (rows times the longest row), while it learns from the rows'
own frames. The dataset puts lead-ins (and a background's lead-in) before utterances after the sampler
has batched them by duration, so the padded batch grows past ``max_duration``; batched by drawn length
(``data.batch_by_drawn_length``, ``asr.data.cut_plan``) the sampler counts them. Everything here comes
from the sampler and the planned draws (no audio is read): the rows' lengths are the planned ones.
``--steps N`` also times N training steps of the recipe's model on each batching, interleaved, from the
feature store (:func:`interleaved_step_cost`).
"""

from __future__ import annotations

from dataclasses import dataclass

from asr.data.cut_plan import DrawnLengths
from asr.data.features import FRAME_SHIFT_S


@dataclass(frozen=True)
class EpochPadding:
    """One epoch's training batches."""

    batches: int
    rows: int
    speech_s: float  # the cuts' own durations
    rows_s: float  # the rows as the dataset makes them (lead-ins, speed)
    padded_s: float  # rows times the longest row, summed over the batches
    largest_padded_s: float  # the largest batch's rows times its longest row

    @property
    def padding_share(self) -> float:
        """Of the padded frames, the share that is padding."""
        return 1.0 - self.rows_s / self.padded_s if self.padded_s else 0.0

    def per_batch(self, seconds: float) -> float:
        return seconds / self.batches if self.batches else 0.0


# Each way of batching: its name in the tables, and its data.batch_by_drawn_length
BATCHINGS = {"duration": False, "drawn length": True}


def batching_override(drawn: bool) -> str:
    return f"data.batch_by_drawn_length={str(drawn).lower()}"


def epoch_paddings(datamodule, epochs: list[int]) -> dict[int, EpochPadding]:
    """The padding of each of ``epochs`` of ``datamodule``'s training loader (its sampler and its dataset's
    planner; the loader is built once)."""
    loader = datamodule.train_dataloader()
    dataset = loader.dataset  # an AsrDataset, or asr.data.buckets.BucketPadded around one
    planner = getattr(dataset, "dataset", dataset).planner
    return {epoch: _epoch_padding(loader.sampler, planner, epoch) for epoch in epochs}


def _epoch_padding(sampler, planner, epoch: int) -> EpochPadding:
    """``sampler`` (an ``asr.data.loader.ResumableSampler``) through ``epoch``, rows measured by ``planner``."""
    sampler.set_epoch(epoch)
    lengths = DrawnLengths(planner, epoch)
    batches = rows = 0
    speech = made = padded = largest = 0.0
    for cuts in sampler:
        row_s = [lengths(cut) for cut in cuts]
        batches, rows = batches + 1, rows + len(row_s)
        speech += sum(cut.duration for cut in cuts)
        made += sum(row_s)
        padded += len(row_s) * max(row_s)
        largest = max(largest, len(row_s) * max(row_s))
    return EpochPadding(batches, rows, speech, made, padded, largest)


def padding_table(results: dict[str, dict[int, EpochPadding]]) -> str:
    """Markdown table: per way of batching and epoch, batches, rows and seconds per batch, padding share."""
    lines = ["| batching | epoch | batches | rows/batch | speech s/batch | rows s/batch | padded s/batch | largest "
             "padded s | padding |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, epochs in results.items():
        for epoch, p in epochs.items():
            lines.append(f"| {name} | {epoch} | {p.batches} | {p.rows / max(p.batches, 1):.1f} | "
                         f"{p.per_batch(p.speech_s):.1f} | {p.per_batch(p.rows_s):.1f} | "
                         f"{p.per_batch(p.padded_s):.1f} | {p.largest_padded_s:.1f} | {100 * p.padding_share:.1f}% |")
    return "\n".join(lines)


def recipe_config(overrides: list[str]):
    """``train.py``'s composed config with ``overrides``, its data module without worker processes."""
    from hydra import compose, initialize_config_dir

    from asr.train.config import repository_conf_dir

    with initialize_config_dir(config_dir=str(repository_conf_dir()), version_base="1.3"):
        # out_dir: a run's folder comes from Hydra's runtime, which a composed config has not got
        return compose("train", overrides=["out_dir=/tmp/bench_padding", *overrides, "data.num_workers=0"])


def recipe_datamodule(overrides: list[str]):
    """The training data module of ``train.py`` with ``overrides``, reading the manifests: only its sampler runs
    here, and a feature store would be built (or rebuilt for other fbank options) before the first batch."""
    from hydra.utils import instantiate

    return instantiate(recipe_config(overrides).data, feature_store=None, _convert_="all")


@dataclass
class StepCost:
    """CPU seconds of the training steps on one way of batching, and the padded seconds they computed."""

    cpu_s: list[float]
    padded_s: list[float]

    def per_step(self) -> float:
        return sum(self.cpu_s) / len(self.cpu_s)

    def per_padded_second(self) -> float:
        return sum(self.cpu_s) / sum(self.padded_s)


def interleaved_step_cost(overrides: list[str], epoch: int, steps: int, warmup: int = 3) -> dict[str, StepCost]:
    """Training steps of the recipe's model on ``epoch``'s first batches, batched by duration and by drawn length
    in turn (two copies of one initial model, each with its optimizer): this process's CPU time per step, so a
    load change hits both alike. The batches are read (from the feature store) before any step is timed."""
    import copy
    import time

    import torch

    from asr.bench.train_step import build_training, make_optimizer, take, train_step

    runs = {}
    for drawn in BATCHINGS.values():
        cfg = recipe_config([*overrides, batching_override(drawn)])
        torch.manual_seed(cfg.seed)
        datamodule, module, _, _ = build_training(cfg)
        loader = datamodule.train_dataloader()
        loader.sampler.set_epoch(epoch)
        runs[drawn] = (cfg, module, take(loader, warmup + steps))
    base = runs[False][1]
    twins = {}
    for drawn, (cfg, _, batches) in runs.items():
        twin = copy.deepcopy(base)  # one initial model and chunk draws for both
        twin.chunks.generator.set_state(base.chunks.generator.get_state())
        twins[drawn] = (twin, *make_optimizer(cfg, twin.model), cfg.trainer.get("gradient_clip_val"), batches)
    costs = {drawn: StepCost([], []) for drawn in twins}
    for i in range(warmup + steps):
        for drawn, (twin, optimizer, scheduler, clip, batches) in twins.items():
            batch = batches[i]
            start = time.process_time()
            train_step(twin, optimizer, scheduler, batch, clip)
            if i >= warmup:
                costs[drawn].cpu_s.append(time.process_time() - start)
                costs[drawn].padded_s.append(batch.feats.size(0) * batch.feats.size(1) * FRAME_SHIFT_S)
    return {name: costs[drawn] for name, drawn in BATCHINGS.items()}


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", default="0,1", help="comma-separated epochs to measure (default 0,1)")
    parser.add_argument("--steps", type=int, default=0,
                        help="also time this many training steps of each batching on the last epoch's first batches, "
                             "interleaved (CPU time; needs the recipe's corpus, CMVN and feature store)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of train.py (experiment=..., data.data_dir=...)")
    args = parser.parse_args(argv)
    epochs = [int(e) for e in args.epochs.split(",")]
    results = {name: epoch_paddings(recipe_datamodule([*args.overrides, batching_override(drawn)]), epochs)
               for name, drawn in BATCHINGS.items()}
    print(padding_table(results))
    for epoch in epochs:
        plain, drawn = results["duration"][epoch], results["drawn length"][epoch]
        print(f"epoch {epoch}: padded seconds per batch, drawn length / duration = "
              f"{drawn.per_batch(drawn.padded_s) / plain.per_batch(plain.padded_s):.3f}; rows per batch "
              f"{drawn.rows / drawn.batches / (plain.rows / plain.batches):.3f}; padded seconds per epoch "
              f"{drawn.padded_s / plain.padded_s:.3f}")
    if args.steps:
        costs = interleaved_step_cost(args.overrides, epochs[-1], args.steps)
        plain, drawn = costs["duration"], costs["drawn length"]
        for name, cost in costs.items():
            print(f"{name}: {1000 * cost.per_step():.0f} ms CPU a step, {1000 * cost.per_padded_second():.1f} ms CPU "
                  f"a padded second ({len(cost.cpu_s)} steps of epoch {epochs[-1]}, interleaved)")
        print(f"CPU a step, drawn length / duration = {drawn.per_step() / plain.per_step():.3f}")
