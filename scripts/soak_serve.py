"""Soak test of the WebSocket server: 32 real-time streams for minutes, a new hotword list at every connection.

The program is ``asr.cli.soak_serve`` (its --help says it all).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.cli.soak_serve import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
