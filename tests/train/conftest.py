import sys
from pathlib import Path

# Lets the tests import the shared stand-ins in helpers.py.
sys.path.insert(0, str(Path(__file__).parent))
