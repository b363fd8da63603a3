import torch

from asr.data.audio import cut_waveform
from asr.data.cmvn import cmvn_features, compute_cmvn, evenly_spread, load_cmvn, save_cmvn
from asr.data.features import LEGACY, SHERPA, TRAINING_BACKEND, FbankExtractor
from asr.data.manifest import read_cuts


def test_cmvn_matches_direct_statistics(tiny_corpus, tmp_path):
    cuts = read_cuts(tiny_corpus / "cuts_dev.jsonl.gz")
    stats = compute_cmvn(cuts, num_workers=0)
    fb = FbankExtractor(backend=TRAINING_BACKEND)
    frames = torch.cat([fb(cut_waveform(c)) for c in cuts]).double()  # (N, 80)
    assert stats["frames"] == frames.shape[0] and stats["skipped"] == 0
    assert torch.allclose(torch.tensor(stats["mean"], dtype=torch.float64), frames.mean(0), atol=1e-6)
    assert torch.allclose(torch.tensor(stats["istd"], dtype=torch.float64), 1 / frames.std(0, unbiased=False), rtol=1e-4)
    mean, istd = load_cmvn(save_cmvn(stats, tmp_path / "cmvn.json"))
    assert mean.shape == istd.shape == (80,) and mean.dtype == torch.float32
    assert cmvn_features(tmp_path / "cmvn.json") == LEGACY


def test_cmvn_records_the_fbank_options_it_used(tiny_corpus, tmp_path):
    cuts = read_cuts(tiny_corpus / "cuts_dev.jsonl.gz")
    stats = compute_cmvn(cuts, FbankExtractor(SHERPA, TRAINING_BACKEND), num_workers=0)
    assert cmvn_features(save_cmvn(stats, tmp_path / "cmvn.json")) == SHERPA
    # files written before the record hold legacy stats
    old = {k: v for k, v in stats.items() if k != "features"}
    assert cmvn_features(save_cmvn(old, tmp_path / "old.json")) == LEGACY


def test_cmvn_subset_is_spread_over_the_manifest(tiny_corpus):
    cuts = list(read_cuts(tiny_corpus / "cuts_train.jsonl.gz"))
    assert len(cuts) >= 6
    keep = len(cuts) // 3
    stats = compute_cmvn(cuts, max_cuts=keep, num_workers=0)
    stride = len(cuts) / keep
    chosen = [cuts[int(i * stride)] for i in range(keep)]
    fb = FbankExtractor(backend=TRAINING_BACKEND)
    frames = torch.cat([fb(cut_waveform(c)) for c in chosen]).double()
    # every k-th cut, not the first `keep` (a prefix is a few speakers of an imported corpus)
    assert chosen[-1] is not cuts[keep - 1]
    assert stats["frames"] == frames.shape[0]
    assert torch.allclose(torch.tensor(stats["mean"], dtype=torch.float64), frames.mean(0), atol=1e-6)


def test_streamed_cmvn_equals_the_in_memory_one(tiny_corpus):
    path = tiny_corpus / "cuts_train.jsonl.gz"
    eager = list(read_cuts(path))
    keep = len(eager) // 2
    in_memory = compute_cmvn(eager, max_cuts=keep, num_workers=0)
    # two workers each read the lazy manifest; round-robin collection keeps the cut order,
    # so even the float64 sums are bit-identical
    streamed = compute_cmvn(read_cuts(path, lazy=True), max_cuts=keep, num_workers=2)
    assert streamed == in_memory
    assert compute_cmvn(read_cuts(path, lazy=True), max_cuts=keep, num_workers=0, total=len(eager)) == in_memory


def test_evenly_spread_streams_every_kth_item():
    assert list(evenly_spread(iter(range(10)), 10, 4)) == [0, 2, 5, 7]
    assert list(evenly_spread(iter(range(3)), 3, 5)) == [0, 1, 2]
    assert list(evenly_spread(iter(range(6)), 6, None)) == list(range(6))
