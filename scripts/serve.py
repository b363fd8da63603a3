"""WebSocket speech recognition server speaking Wenet's runtime protocol.

The program is ``asr.cli.serve`` (its --help says it all).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.cli.serve import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
