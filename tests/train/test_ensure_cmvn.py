"""ensure_run_cmvn: a driver computes the stats its runs' fbank preset reads, once, and leaves stats alone."""

import json
from pathlib import Path

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


def test_stats_of_a_run_with_a_feature_store_are_read_from_the_store_it_trains_on(tmp_path, monkeypatch):
    from asr.data import cmvn as cmvn_module
    from asr.data.cmvn import compute_cmvn
    from asr.data.feature_store import STORE_INFO, store_is_current, store_key
    from asr.data.features import FbankExtractor, training_backend
    from asr.data.manifest import read_cuts

    corpus = make_tiny_corpus(tmp_path / "corpus", n_train=6, n_eval=1)
    # one cut's audio unreadable: the store keeps it without features, and the stats skip it as from audio
    first = next(iter(read_cuts(corpus / "cuts_train.jsonl.gz")))
    broken = Path(first.recording.sources[0].source)
    broken = broken if broken.is_absolute() else corpus / broken
    broken.write_bytes(b"not audio")
    store = tmp_path / "store"
    run = ["features=floor", "data.cmvn_file=cmvn_floor.json", f"data.feature_store={store}"]
    # audio the stats read (in their loader's worker processes, hence a file): none, the store's build only
    computed = tmp_path / "computed.txt"
    real = cmvn_module.cut_waveform

    def reading(cut):
        with computed.open("a") as f:
            f.write(cut.id + "\n")
        return real(cut)

    monkeypatch.setattr(cmvn_module, "cut_waveform", reading)
    path = ensure_run_cmvn(corpus, run, max_cuts=4)
    assert not computed.exists()
    # the store training reads is built and current: training will not build it again
    extractor = FbankExtractor(PRESETS["floor"], training_backend(PRESETS["floor"]))
    assert store_is_current(store / "cuts_train", store_key(corpus / "cuts_train.jsonl.gz", extractor))
    assert (store / "cuts_train" / STORE_INFO).is_file()
    # the same statistics, to the bit, as the fbank computed again from the audio
    stats = json.loads(path.read_text())
    again = compute_cmvn(read_cuts(corpus / "cuts_train.jsonl.gz"), extractor, max_cuts=4, num_workers=0)
    assert json.loads(json.dumps(again)) == stats and len(computed.read_text().split()) == 4
    assert stats["skipped"] == 1 and stats["frames"] > 0
