"""How much of a recipe's training batches is padding, batched by duration and by drawn length
(data.batch_by_drawn_length: lead-ins counted by the sampler). Reads no audio: the sampler and the
planned draws only (asr/bench/padding.py).

Usage (from the repository root):
    python scripts/bench_padding.py experiment=quickstart_rooms data.data_dir=data/synth
    python scripts/bench_padding.py --epochs 0,1,2 experiment=quickstart_rooms data.data_dir=data/synth
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.bench.padding import main  # noqa: E402

if __name__ == "__main__":
    main()
