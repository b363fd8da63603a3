"""ensure_run_cmvn: a driver computes the stats its runs' fbank preset reads, once, and leaves stats alone."""

import json

from asr.data.cmvn import cmvn_features
from asr.data.features import LEGACY, PRESETS
from asr.train.run import ensure_run_cmvn
from tests.train.tiny_corpus import make_tiny_corpus


def test_missing_recipe_stats_are_computed_with_the_recipe_features_and_kept(tmp_path):
    corpus = make_tiny_corpus(tmp_path / "corpus", n_train=4, n_eval=1)
    path = ensure_run_cmvn(corpus, ["features=floor", "data.cmvn_file=cmvn_floor.json"], max_cuts=4)
    assert path == corpus / "cmvn_floor.json" and cmvn_features(path) == PRESETS["floor"] != LEGACY
    stats = json.loads(path.read_text())
    assert stats["frames"] > 0 and len(stats["mean"]) == 80
    before = path.stat().st_mtime_ns
    assert ensure_run_cmvn(corpus, ["features=floor", "data.cmvn_file=cmvn_floor.json"]) == path
    assert path.stat().st_mtime_ns == before  # existing stats are not recomputed
    # the legacy stats the corpus ships are found, not rewritten
    assert ensure_run_cmvn(corpus, ["features=legacy", "data.cmvn_file=cmvn.json"]) == corpus / "cmvn.json"
