"""The peers benchmark (asr/bench/peers.py, scripts/bench_peers.py) on tiny models: ours alone, and each
peer whose code is here (Wenet from its mirror, exported for the test; ESPnet when installed)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from asr.bench.peers import PeerSize, peers_table, run_peers
from asr.bench.synthetic import audio_seconds, synthetic_batches

ROOT = Path(__file__).resolve().parents[2]
WENET_MIRROR = Path("/work/.mirror/wenet-e2e+wenet/repo")
TINY = PeerSize(d_model=16, heads=2, layers=1, ffn_dim=32, kernel=3, decoder_layers=1, r2l_layers=1,
                decoder_ffn_dim=32, vocab=30)


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: on a shared 2-core host a second one mostly waits for a core."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _batches(n=2):
    return synthetic_batches(n, max_duration=2.0, vocab_size=TINY.vocab, feat_dim=TINY.input_dim, seconds=(0.6, 1.0))


def test_ours_alone_counts_every_timed_step_and_its_audio():
    batches = _batches()
    results = run_peers(["ours", "ours_encoder"], TINY, batches, rounds=2)
    assert [r.name for r in results] == ["ours", "ours_encoder"]
    for r in results:
        assert len(r.losses) == 2 * len(batches) and all(torch.isfinite(torch.tensor(r.losses)))
        assert r.audio_s == pytest.approx(2 * sum(audio_seconds(b) for b in batches))
        assert r.wall > 0 and r.params > 0 and r.peak_bytes is None and r.gpu_busy is None  # CPU: no CUDA figures
    table = peers_table(results).splitlines()
    assert table[0].split()[:3] == ["contender", "params", "M"] and table[1].split()[3] == "1.00"


def test_a_missing_peer_is_skipped_with_the_reason():
    logged = []
    results = run_peers(["ours", "wenet"], TINY, _batches(1), rounds=1, wenet_src=None, log=logged.append)
    assert [r.name for r in results] == ["ours"]
    assert any("wenet: skipped" in line and "--wenet-src" in line for line in logged)
    with pytest.raises(ValueError, match="unknown contender"):
        run_peers(["nope"], TINY, _batches(1), rounds=1)


@pytest.fixture(scope="module")
def wenet_src(tmp_path_factory):
    if not WENET_MIRROR.is_dir() or shutil.which("git") is None:
        pytest.skip(f"no Wenet mirror at {WENET_MIRROR}")
    target = tmp_path_factory.mktemp("wenet_src")
    archive = subprocess.run(["git", f"--git-dir={WENET_MIRROR}", "archive", "HEAD", "wenet"], capture_output=True)
    if archive.returncode:
        pytest.skip(f"the Wenet mirror did not export: {archive.stderr.decode()[-200:]}")
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target


def test_wenet_and_espnet_beside_ours_through_the_script(wenet_src):
    names = "ours,wenet" + (",ours_encoder,espnet_encoder" if _importable("espnet2") else "")
    out = subprocess.run([sys.executable, "scripts/bench_peers.py", "--size", "tiny", "--batches", "1", "--rounds", "1",
                          "--max-duration", "2", "--seconds", "0.6", "1.0", "--threads", "1", "--contenders", names,
                          "--wenet-src", str(wenet_src)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines() if line and line.split()[0] in names}
    assert set(rows) == set(names.split(","))
    assert float(rows["wenet"][2]) > 0 and float(rows["wenet"][3]) > 0  # audio s/s and ours over it


def _importable(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True
