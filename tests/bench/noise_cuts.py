"""Three noise "sentences" with char-unit texts of the tiny checkpoint (tests.serve.helpers), as a Lhotse manifest."""

from pathlib import Path

import soundfile as sf

from asr.data.features import SAMPLE_RATE

TEXTS = ((1.0, "abc de"), (0.8, "fgh"), (1.2, "de abc"))


def write_noise_cuts(folder: Path) -> Path:
    """cuts.jsonl.gz in ``folder``, its audio beside it; returns the manifest's path."""
    from asr.data.importers import make_cut, make_recording
    from asr.data.manifest import write_cuts
    from tests.serve.helpers import noise

    cuts = []
    for i, (seconds, text) in enumerate(TEXTS):
        path = folder / f"s{i}.wav"
        sf.write(path, noise(seconds, i, SAMPLE_RATE).numpy(), SAMPLE_RATE)
        cuts.append(make_cut(f"s{i}", make_recording(f"s{i}", path), text))
    write_cuts(cuts, folder / "cuts.jsonl.gz")
    return folder / "cuts.jsonl.gz"
