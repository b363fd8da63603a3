"""Train a streaming Conformer ASR model from the Hydra configs in conf/.

Usage (from the repository root):
    python scripts/train.py                                   # experiment=quickstart (synth, CPU)
    python scripts/train.py pos_enc=shaw pos_enc.max_distance=16
    python scripts/train.py -m pos_enc=rel_xl,shaw,abs_sin,abs_learned,rel_bias,rope,none
    python scripts/train.py experiment=librispeech_u2pp trainer.devices=8 trainer.num_nodes=2
    python scripts/train.py resume=true                       # continue exp/<run>/checkpoints/last.ckpt
    python scripts/train.py ckpt_path=exp/x/checkpoints/last.ckpt
    python scripts/train.py --help                            # config groups and options

Runs go to exp/<experiment>_<pos_enc>/ (multirun: exp/multirun/...): checkpoints/,
tensorboard/, csv/, .hydra/ and train_summary.json. ``python -m asr.train`` is the same command.
The process runs on tcmalloc (else jemalloc, else oneTBB's tbbmalloc from the tbb wheel) where one is installed:
``ASR_ALLOCATOR=system`` keeps the C library's malloc (asr.train.allocator).
"""

import sys
from pathlib import Path

# Allow `python scripts/train.py` from a checkout that is not pip-installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.train.allocator import preload_allocator_or_exit  # noqa: E402

if __name__ == "__main__":
    preload_allocator_or_exit()  # before torch loads: tcmalloc, jemalloc or tbbmalloc where installed (ASR_ALLOCATOR)
    from asr.train.run import main

    main()
