"""Decode a test split with sherpa-onnx itself and with our streaming recognizer; compare texts and WERs.

The program is ``asr.cli.check_sherpa`` (its --help says it all).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.cli.check_sherpa import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
