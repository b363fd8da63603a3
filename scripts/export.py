"""Export a checkpoint's streaming encoder step (explicit state tensors in and out) as ONNX and TorchScript,

The program is ``asr.cli.export`` (its --help says it all).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.cli.export import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
