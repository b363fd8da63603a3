"""Hotword biasing benchmark: WER, U-WER and B-WER per list size, with and without the LMs.

The program is ``asr.cli.bench_biasing`` (its --help says it all).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.cli.bench_biasing import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
