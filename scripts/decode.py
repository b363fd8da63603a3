"""Decode a split with a trained checkpoint and score WER/CER for one or more modes.

The program is ``asr.cli.decode`` (its --help says it all).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.cli.decode import main  # noqa: E402

if __name__ == "__main__":
    main()  # returns the summary (for callers in Python); errors exit inside it
