"""Train a streaming Conformer ASR model from the Hydra configs in conf/.

Usage (from the repository root):
    python -m asr.train                                       # experiment=quickstart (synth, CPU)
    python -m asr.train pos_enc=shaw pos_enc.max_distance=16
    python -m asr.train -m pos_enc=rel_xl,shaw,abs_sin,abs_learned,rel_bias,rope,none
    python -m asr.train resume=true                           # continue exp/<run>/checkpoints/last.ckpt
    python -m asr.train --help                                # config groups and options

``scripts/train.py`` is the same command.
"""

from asr.train.allocator import preload_allocator_or_exit

preload_allocator_or_exit()  # before torch loads: tcmalloc, jemalloc or tbbmalloc where installed (ASR_ALLOCATOR)

from asr.train.run import main  # noqa: E402

main()
