"""Two training runs side by side: for every decode both have (the quickstart's decode/<split>_<context>[_lm]
folders, each search mode), both WERs and the paired difference with its bootstrap interval
(asr/evaluation/compare_runs.py).

Usage (from the repository root):
    python scripts/compare_runs.py exp/quickstart_rel_xl exp/quickstart_rel_xl_20261129-101500
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.evaluation.compare_runs import main  # noqa: E402

if __name__ == "__main__":
    main()
