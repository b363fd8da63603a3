"""The allocator a training process re-executes itself with (asr.train.allocator)."""

import subprocess
import sys
from pathlib import Path

import pytest

from asr.train.allocator import (
    ALLOCATOR_ENV,
    PRELOADED_ENV,
    allocator_in_use,
    caller_preload,
    choose,
    find_library,
    preload_allocator_or_exit,
    preload_env,
    reexec_with_allocator,
)

CHECKOUT = Path(__file__).resolve().parents[2]


def fake_libs(directory: Path, *names: str) -> list[Path]:
    """[directory] holding empty files of these names (the search looks at names only)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_bytes(b"")
    return [directory]


def test_auto_prefers_tcmalloc_then_jemalloc_then_tbbmalloc_then_the_c_library(tmp_path):
    tbb = ("libtbbmalloc.so.2", "libtbbmalloc_proxy.so.2")
    choice = choose("auto", fake_libs(tmp_path / "all", "libjemalloc.so.2", *tbb, "libtcmalloc_minimal.so.4"),
                    platform="linux")
    assert (choice.name, choice.path) == ("tcmalloc", tmp_path / "all" / "libtcmalloc_minimal.so.4")
    choice = choose("auto", fake_libs(tmp_path / "je", "libjemalloc.so.2", *tbb), platform="linux")
    assert (choice.name, choice.path) == ("jemalloc", tmp_path / "je" / "libjemalloc.so.2")
    choice = choose("auto", fake_libs(tmp_path / "tbb", *tbb), platform="linux")
    assert (choice.name, choice.path) == ("tbbmalloc", tmp_path / "tbb" / "libtbbmalloc_proxy.so.2")
    choice = choose("auto", fake_libs(tmp_path / "none"), platform="linux")
    assert (choice.name, choice.path) == ("system", None)
    assert "pip install tbb" in choice.reason and "libtcmalloc-minimal4" in choice.reason


def test_the_full_tcmalloc_is_found_when_the_minimal_one_is_not(tmp_path):
    assert find_library("tcmalloc", fake_libs(tmp_path, "libtcmalloc.so.4")) == tmp_path / "libtcmalloc.so.4"
    assert find_library("jemalloc", [tmp_path]) is None


def test_explicit_settings(tmp_path):
    dirs = fake_libs(tmp_path, "libjemalloc.so.2")
    assert choose("jemalloc", dirs, platform="linux").path == tmp_path / "libjemalloc.so.2"
    assert choose("system", dirs, platform="linux").path is None
    with pytest.raises(ValueError, match="libtcmalloc_minimal.so.4.*apt-get"):
        choose("tcmalloc", dirs, platform="linux")
    with pytest.raises(ValueError, match="tbbmalloc: none of libtbbmalloc_proxy.so.2 .*pip install tbb"):
        choose("tbbmalloc", dirs, platform="linux")
    with pytest.raises(ValueError, match="expected one of auto, tcmalloc, jemalloc, tbbmalloc, system"):
        choose("mimalloc", dirs, platform="linux")
    assert choose(str(tmp_path / "libjemalloc.so.2"), dirs, platform="linux").path == tmp_path / "libjemalloc.so.2"
    with pytest.raises(ValueError, match="no such file"):
        choose(str(tmp_path / "missing.so"), dirs, platform="linux")
    # LD_PRELOAD is the Linux loader's: elsewhere nothing is preloaded
    assert choose("auto", dirs, platform="darwin").path is None


def test_preload_env_puts_the_library_first_and_keeps_the_callers(tmp_path):
    lib = tmp_path / "libtcmalloc_minimal.so.4"
    env = {"LD_PRELOAD": "/opt/libhook.so", "PATH": "/bin"}
    out = preload_env(env, lib)
    assert out["LD_PRELOAD"] == f"{lib} /opt/libhook.so"
    assert out[PRELOADED_ENV] == str(lib) and out["PATH"] == "/bin"
    assert int(out["TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD"]) >= 1 << 40
    assert env == {"LD_PRELOAD": "/opt/libhook.so", "PATH": "/bin"}  # the caller's mapping untouched
    assert preload_env({}, lib)["LD_PRELOAD"] == str(lib)


def test_the_tbb_proxy_is_preloaded_after_its_allocator_with_freed_large_objects_cached(tmp_path):
    fake_libs(tmp_path, "libtbbmalloc.so.2", "libtbbmalloc_proxy.so.2")
    proxy = tmp_path / "libtbbmalloc_proxy.so.2"
    out = preload_env({"LD_PRELOAD": "/opt/libhook.so"}, proxy)
    # the proxy links libtbbmalloc.so.2, which the loader does not find in the wheel's folder by itself
    assert out["LD_PRELOAD"] == f"{tmp_path / 'libtbbmalloc.so.2'} {proxy} /opt/libhook.so"
    assert out[PRELOADED_ENV] == str(proxy) and out["TBB_MALLOC_SET_HUGE_SIZE_THRESHOLD"] == str(1 << 20)
    assert "TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD" not in out
    # the caller's own threshold stays
    assert preload_env({"TBB_MALLOC_SET_HUGE_SIZE_THRESHOLD": "0"}, proxy)["TBB_MALLOC_SET_HUGE_SIZE_THRESHOLD"] == "0"
    assert caller_preload(out) == str(tmp_path / "libtbbmalloc.so.2")


def test_reexec_replaces_the_process_once(tmp_path):
    dirs = fake_libs(tmp_path, "libtcmalloc_minimal.so.4")
    calls = []
    reexec_with_allocator({"PATH": "/bin"}, lambda exe, argv, env: calls.append((exe, argv, env)), dirs)
    (exe, argv, env), = calls
    assert exe == sys.executable and argv[0] == sys.executable and argv[1:] == sys.orig_argv[1:]
    assert env["LD_PRELOAD"] == str(tmp_path / "libtcmalloc_minimal.so.4")
    # the re-executed process: marked, so it runs on
    calls.clear()
    choice = reexec_with_allocator(env, lambda *a: calls.append(a), dirs)
    assert calls == [] and choice.name == "libtcmalloc_minimal.so.4"


def test_no_reexec_when_the_caller_preloads_an_allocator_or_asks_for_the_c_library(tmp_path):
    dirs = fake_libs(tmp_path, "libtcmalloc_minimal.so.4")
    calls = []
    choice = reexec_with_allocator({"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}, lambda *a: calls.append(a), dirs)
    assert calls == [] and choice.name == "preloaded"
    choice = reexec_with_allocator({ALLOCATOR_ENV: "system"}, lambda *a: calls.append(a), dirs)
    assert calls == [] and choice.name == "system"
    with pytest.raises(ValueError):
        reexec_with_allocator({ALLOCATOR_ENV: "jemalloc"}, lambda *a: calls.append(a), dirs)
    assert calls == []


def test_a_host_without_either_library_is_told_how_to_get_one(tmp_path, capsys):
    preload_allocator_or_exit({}, fake_libs(tmp_path / "none"))
    assert ("allocator: the C library's malloc; no tcmalloc, jemalloc or tbbmalloc installed (for faster CPU "
            "training: pip install tbb, or apt-get install -y libtcmalloc-minimal4)") in capsys.readouterr().err
    preload_allocator_or_exit({ALLOCATOR_ENV: "system"}, fake_libs(tmp_path / "none"))
    assert capsys.readouterr().err == ""  # asked for: nothing to say


def test_caller_preload_and_the_allocator_in_use():
    assert caller_preload({"LD_PRELOAD": "/x/libhook.so:/y/libtcmalloc.so.4"}) == "/y/libtcmalloc.so.4"
    assert caller_preload({"LD_PRELOAD": "/x/libhook.so"}) is None and caller_preload({}) is None
    assert allocator_in_use({PRELOADED_ENV: "/usr/lib/libjemalloc.so.2"}) == "libjemalloc.so.2"
    assert allocator_in_use({"LD_PRELOAD": "/y/libtcmalloc_minimal.so.4"}) == "libtcmalloc_minimal.so.4"
    assert allocator_in_use({}) == "system"


PROBE = """
import sys
sys.path.insert(0, {checkout!r})
from asr.train.allocator import preload_allocator_or_exit
preload_allocator_or_exit()
maps = open("/proc/self/maps").read()
print("mapped" if any(n in maps for n in ("libtcmalloc", "libjemalloc", "libtbbmalloc")) else "not mapped")
"""


@pytest.mark.skipif(sys.platform != "linux", reason="LD_PRELOAD is the Linux loader's")
def test_an_installed_allocator_is_mapped_in_the_reexecuted_process(tmp_path):
    if choose("auto").path is None:
        pytest.skip("no tcmalloc, jemalloc or tbbmalloc installed on this host")
    script = tmp_path / "probe.py"
    script.write_text(PROBE.format(checkout=str(CHECKOUT)))
    env = {"PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "mapped"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                         env={**env, ALLOCATOR_ENV: "system"})
    assert out.stdout.strip() == "not mapped"


@pytest.mark.skipif(sys.platform != "linux", reason="LD_PRELOAD is the Linux loader's")
def test_the_tbb_wheels_allocator_runs_torch(tmp_path):
    try:
        choose("tbbmalloc")
    except ValueError:
        pytest.skip("the tbb wheel is not installed in this environment")
    script = tmp_path / "probe.py"
    script.write_text(PROBE.format(checkout=str(CHECKOUT)) + TORCH_STEP)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", ALLOCATOR_ENV: "tbbmalloc"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["mapped", "libtbbmalloc_proxy.so.2", "True"]


TORCH_STEP = """
import os, torch
print(os.path.basename(os.environ["ASR_ALLOCATOR_PRELOADED"]))
model = torch.nn.Linear(256, 256)
x = torch.randn(64, 256, generator=torch.Generator().manual_seed(0))
with torch.autocast("cpu", dtype=torch.bfloat16):
    model(x).float().square().mean().backward()
print(bool(torch.isfinite(model.weight.grad).all()))
"""


def test_a_bad_setting_ends_the_entry_point_with_its_message(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(PROBE.format(checkout=str(CHECKOUT)))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", ALLOCATOR_ENV: "/nowhere/libmalloc.so"})
    assert out.returncode == 1 and "ASR_ALLOCATOR=/nowhere/libmalloc.so: no such file" in out.stderr
