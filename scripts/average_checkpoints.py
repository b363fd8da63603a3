"""Average the top-k checkpoints of a training run into one checkpoint for decoding.

The program is ``asr.cli.average_checkpoints`` (its --help says it all).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.cli.average_checkpoints import main  # noqa: E402

if __name__ == "__main__":
    main()
