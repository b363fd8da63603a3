"""Two training runs side by side: for every decode both have (the quickstart's decode/<split>_<context>[_lm]
folders, each search mode), both WERs and the paired difference with its bootstrap interval
(asr/evaluation/compare_runs.py); several runs a side (seeds, joined by commas) are pooled, and the
interval then draws the runs as well as the utterances.

Usage (from the repository root):
    python scripts/compare_runs.py exp/quickstart_rel_xl exp/quickstart_rel_xl_20261129-101500
    python scripts/compare_runs.py exp/base,exp/base_seed7 exp/new,exp/new_seed7   # two seeds a side
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.evaluation.compare_runs import main  # noqa: E402

if __name__ == "__main__":
    main()
