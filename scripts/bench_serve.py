"""Load test of scripts/serve.py on loopback: N concurrent real-time clients, latency and CPU per N.

The program is ``asr.cli.bench_serve`` (its --help says it all).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.cli.bench_serve import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
