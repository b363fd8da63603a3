"""Streaming recognition of audio files with a trained checkpoint.

The program is ``asr.cli.stream`` (its --help says it all).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.cli.stream import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
