"""Ablation of the encoder's position schemes: train each on the same data and budget, report.

The program is ``asr.cli.ablate`` (its --help says it all).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.cli.ablate import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
