"""What silence before speech costs a streamed model: fresh streams against streams after a lead-in,

The program is ``asr.cli.probe_lead_in`` (its --help says it all).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.cli.probe_lead_in import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
