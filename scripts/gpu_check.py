"""Check the GPU path on a CUDA machine in one command, and write one report.

The program is ``asr.cli.gpu_check`` (its --help says it all).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.cli.gpu_check import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
