"""``trainer.precision: auto``: bf16 autocast where it makes the run's own step faster, float32 elsewhere.

Lightning's ``bf16-mixed`` keeps the weights, the optimizer's state and the losses in float32 and runs matrix
products and convolutions in bfloat16. On a CPU whose cores multiply bfloat16 natively (AVX512-BF16, AMX) that
can shorten a small model's step by a third or more; where bfloat16 is emulated, or where the casts around
small products cost more than the products save (a small model on a GPU, bound by kernel launches), it
lengthens it (data/results/speed.md and gpu.md have both). Which one holds is a property of the host and the
model together, so ``auto`` measures it: forward and backward passes of the run's own model on a batch shaped
like the recipe's, in float32 and under autocast in turn, on the device the trainer will use, before the
trainer is built. The choice and its timings go to ``<run folder>/precision.json``; a run that resumes in that
folder reads its choice back instead of measuring again, so its precision does not change mid-run.

Several processes (``devices`` or ``num_nodes`` above 1) would each measure and could disagree, so there
``auto`` is refused with a message to set the precision.
"""

from __future__ import annotations

import copy
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from asr.data.features import FRAMES_PER_SECOND
from asr.train.device import synchronize

AUTO = "auto"
CHOICE_FILE = "precision.json"
# bf16 is chosen when the float32 step takes at least this many times the autocast step: below it the gain
# is within the probe's run-to-run spread on a busy host.
MIN_SPEEDUP = 1.15


@dataclass(frozen=True)
class PrecisionChoice:
    """What ``auto`` resolved to, and why (``fp32_ms`` / ``bf16_ms``: the probe's median step, or None)."""

    precision: str
    reason: str
    fp32_ms: float | None = None
    bf16_ms: float | None = None

    def line(self) -> str:
        return f"trainer.precision=auto -> {self.precision}: {self.reason}"


def probe_batch(feat_dim: int, vocab_size: int, max_duration_s: float, utterance_s: float = 3.0,
                seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(feats (B, T, feat_dim), feat_lens (B,), tokens (B, U), token_lens (B,)): as many ``utterance_s``
    rows as fill ``max_duration_s``, 3 tokens a second, from a private generator (no global draw)."""
    g = torch.Generator().manual_seed(seed)
    rows = max(1, int(max_duration_s // utterance_s))
    frames = int(utterance_s * FRAMES_PER_SECOND)
    units = max(1, int(3 * utterance_s))
    feats = torch.randn(rows, frames, feat_dim, generator=g)
    tokens = torch.randint(1, max(2, vocab_size - 1), (rows, units), generator=g)
    return feats, torch.full((rows,), frames), tokens, torch.full((rows,), units)


def time_steps(model: torch.nn.Module, batch: tuple, repeats: int = 4, warmup: int = 1,
               device: str | torch.device = "cpu") -> tuple[float, float]:
    """Median seconds of a forward and backward of ``model``'s loss on ``batch`` on ``device``: (float32, bf16
    autocast), the two alternating so that a change in the host's load hits both alike. On a CPU the seconds are
    the process's CPU time (all its threads), not the wall clock: another program on the same cores stretches
    the wall clock of whichever pass it interrupts, and a probe beside a benchmark read 1.14x where the idle
    host reads 1.67x, and trained in float32 at half the speed. ``model`` is left untouched (a copy trains)
    and the global RNG is restored afterwards."""
    device = torch.device(device)
    clock = time.process_time if device.type == "cpu" else time.perf_counter
    probe = copy.deepcopy(model).to(device).train()
    feats, feat_lens, tokens, token_lens = (t.to(device) for t in batch)
    times: dict[bool, list[float]] = {False: [], True: []}
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        for i in range(warmup + repeats):
            for bf16 in (False, True):
                synchronize(device)
                start = clock()
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                    loss = probe(feats, feat_lens, tokens, token_lens)["loss"]
                loss.backward()
                probe.zero_grad(set_to_none=True)
                synchronize(device)
                if i >= warmup:
                    times[bf16].append(clock() - start)
    return statistics.median(times[False]), statistics.median(times[True])


def probe_device(accelerator: str) -> str:
    """The device a single-process trainer with this ``accelerator`` trains on."""
    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ValueError(f"trainer.accelerator={accelerator} but this machine has no CUDA device.")
        return "cuda"
    if accelerator in ("cpu", "auto"):
        return "cpu"
    raise ValueError(f"trainer.precision=auto measures on cpu or cuda; trainer.accelerator={accelerator}: set "
                     "trainer.precision to 32-true or bf16-mixed.")


def resolve_precision(requested: str, trainer_cfg: dict, out_dir: str | Path,
                      measure: Callable[[str], tuple[float, float]]) -> PrecisionChoice:
    """The precision a run trains at. ``requested`` other than ``auto`` is returned as it is; ``measure``
    (called with the device, only when the run folder has no stored choice) returns the probe's (float32, bf16)
    seconds."""
    if str(requested) != AUTO:
        return PrecisionChoice(str(requested), "set by the recipe")
    devices, nodes = trainer_cfg.get("devices", 1), trainer_cfg.get("num_nodes", 1)
    if not (devices in (1, "1") and nodes in (1, "1")):
        raise ValueError(f"trainer.precision=auto measures one process's host; with devices={devices} and "
                         f"num_nodes={nodes} set trainer.precision to 32-true or bf16-mixed.")
    device = probe_device(str(trainer_cfg.get("accelerator", "cpu")))
    stored = Path(out_dir) / CHOICE_FILE
    if stored.is_file():
        choice = read_choice(stored)
        return PrecisionChoice(choice.precision, f"this run folder's earlier choice ({stored})",
                               choice.fp32_ms, choice.bf16_ms)
    fp32_s, bf16_s = measure(device)
    speedup = fp32_s / bf16_s
    precision = "bf16-mixed" if speedup >= MIN_SPEEDUP else "32-true"
    choice = PrecisionChoice(precision, f"the model's step on {device} took {1000 * fp32_s:.0f} ms in float32 and "
                             f"{1000 * bf16_s:.0f} ms under bf16 autocast ({speedup:.2f}x; bf16 from "
                             f"{MIN_SPEEDUP}x)", round(1000 * fp32_s, 1), round(1000 * bf16_s, 1))
    stored.parent.mkdir(parents=True, exist_ok=True)
    stored.write_text(json.dumps(asdict(choice), indent=2))
    return choice


def read_choice(path: Path) -> PrecisionChoice:
    """A stored choice; a file that is not one is an error naming it (a run folder is untrusted input)."""
    try:
        data = json.loads(path.read_text())
        choice = PrecisionChoice(**data)
    except (ValueError, TypeError) as err:
        raise ValueError(f"{path} is not a precision choice ({err}); delete it to measure again.") from err
    if choice.precision not in ("32-true", "bf16-mixed"):
        raise ValueError(f"{path} names precision {choice.precision!r}; delete it to measure again.")
    return choice


def measure_recipe_step(cfg, feat_dim: int, device: str = "cpu") -> tuple[float, float]:
    """:func:`time_steps` for the model a composed training config describes, on a batch of its
    ``data.max_duration``; the model is built under a forked RNG, so the run's own initialization is the one
    it would have without the probe."""
    from omegaconf import OmegaConf

    from asr.data.tokenizer import load_tokenizer
    from asr.model.asr_model import build_asr_model
    from asr.train.checkpoint import model_kwargs_from_config

    tokenizer = load_tokenizer(cfg.data.tokenizer_path)
    kwargs = model_kwargs_from_config(OmegaConf.to_container(cfg.model, resolve=True),
                                      OmegaConf.to_container(cfg.pos_enc, resolve=True), tokenizer)
    with torch.random.fork_rng(devices=[]):
        model = build_asr_model(**kwargs)
    batch = probe_batch(feat_dim, int(tokenizer.vocab_size), float(cfg.data.max_duration))
    return time_steps(model, batch, device=device)
