"""The README's "Bring your own model and audio" path, command by command, as a user runs it: import a
released Wenet model, decode a folder and a data.list, stream, serve, export to sherpa-onnx and check it,
build a corpus and fine-tune. Every command of that README section is in README_COMMANDS and runs here
(in a scratch folder, with a tiny model; only the fine-tuning gets extra overrides that shrink the run)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from asr.train.checkpoint import load_model, model_state_dict
from tests.interop.own_data import own_data, wenet_model_folder

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}

README_COMMANDS = {
    "import": "python scripts/import_wenet.py wenet_model/ --out exp/wenet/model.ckpt",
    "decode_folder": "python scripts/decode.py --checkpoint exp/wenet/model.ckpt my_audio/ --reverse-weight 0.3",
    "decode_list": "python scripts/decode.py --checkpoint exp/wenet/model.ckpt my_data/test/data.list "
                   "--reverse-weight 0.3",
    "stream": "python scripts/stream.py --checkpoint exp/wenet/model.ckpt --chunk-size 16 --left-chunks 4 "
              "--reverse-weight 0.3 my_audio/",
    "serve": "python scripts/serve.py --checkpoint exp/wenet/model.ckpt --port 10086",
    "client": "python scripts/client.py --uri ws://127.0.0.1:10086 my_audio/test0.flac",
    "export": "python scripts/export.py --checkpoint exp/wenet/model.ckpt --format sherpa-onnx "
              "--out-dir exp/wenet/sherpa --chunk-size 16 --left-chunks 4",
    "check_sherpa": "python scripts/check_sherpa.py --checkpoint exp/wenet/model.ckpt --export-dir exp/wenet/sherpa "
                    "my_data/test/data.list",
    "prepare": "python scripts/prepare_data.py --corpus wenet --src train=my_data/train/data.list "
               "dev=my_data/dev/data.list --data-dir data/mine --units char",
    "finetune": "python scripts/train.py experiment=finetune init_from=exp/wenet/model.ckpt data.data_dir=data/mine "
                "data.tokenizer_path=wenet_model hydra.run.dir=exp/wenet_finetuned trainer.max_steps=2000",
    "decode_finetuned": "python scripts/decode.py --checkpoint exp/wenet_finetuned/checkpoints/last.ckpt "
                        "my_data/test/data.list --reverse-weight 0.3",
}
# Seconds instead of hours: the run's length, and what a 2-core test machine needs (not the user's choices).
SHRINK = {"trainer.max_steps=2000":
          "trainer.max_steps=3 optim.scheduler.warmup_steps=1 data.num_workers=0 data.max_duration=4.0 "
          "data.max_duration_per_utt=2.0 data.num_buckets=2 trainer.limit_val_batches=1 "
          "~callbacks.progress_bar +trainer.enable_model_summary=false logger=csv"}


def argv(name: str, **replace: str) -> list[str]:
    command = README_COMMANDS[name]
    for old, new in {**SHRINK, **replace}.items():
        command = command.replace(old, new)
    words = shlex.split(command)
    assert words[0] == "python" and words[1].startswith("scripts/")
    return [sys.executable, str(ROOT / words[1]), *words[2:]]


def run(folder: Path, name: str, **replace: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv(name, **replace), cwd=folder, env=ENV, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{name}: {proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def user(tmp_path_factory) -> Path:
    """A user's folder: the released model, their data, and the imported checkpoint (the first command)."""
    folder = tmp_path_factory.mktemp("user")
    wenet_model_folder(folder)
    own_data(folder)
    out = run(folder, "import").stdout
    assert "decoder : 1 layers + right-to-left 1" in out and (folder / "exp" / "wenet" / "model.ckpt").is_file()
    return folder


@pytest.mark.slow
def test_decode_a_folder_and_a_data_list_without_a_corpus(user):
    out = run(user, "decode_folder").stdout
    assert "no references" in out and "no WER computed" in out
    (folder_out,) = (user / "exp" / "wenet" / "decode").glob("*_my_audio-*_full")  # a folder per input
    text = (folder_out / "attention_rescoring.text").read_text()
    assert sorted(line.split(" ", 1)[0] for line in text.splitlines()) == ["calls/test1", "test0", "test2"]
    out = run(user, "decode_list").stdout
    (list_out,) = (user / "exp" / "wenet" / "decode").glob("test_data-*_full")
    summary = json.loads((list_out / "summary.json").read_text())
    assert summary["references"] and summary["modes"]["attention_rescoring"]["utterances"] == 3
    assert "attention_rescoring" in out and "no WER computed" not in out


@pytest.mark.slow
def test_stream_and_serve(user):
    out = run(user, "stream").stdout
    assert out.count("  final: ") == 3 and "no references: no WER computed" in out
    server = subprocess.Popen(argv("serve", **{"--port 10086": "--port 0"}), cwd=user, env=ENV,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        assert line.startswith("serving on ws://127.0.0.1:"), line + server.stderr.read()
        client = run(user, "client", **{"ws://127.0.0.1:10086": line.split()[2]}).stdout
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert "== test0.flac" in client and "final 1:" in client


def sherpa_installed() -> bool:
    try:
        import sherpa_onnx  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(not sherpa_installed(), reason="pip install sherpa-onnx==2.0.1 (the dev extra)")
def test_export_to_sherpa_onnx_and_check_it(user):
    out = run(user, "export").stdout
    assert "sherpa-onnx Wenet CTC" in out and "warning: sherpa-onnx computes its fbank" in out
    check = run(user, "check_sherpa").stdout
    assert "3 utterances: identical text" in check and "WER ours (streaming CTC greedy)" in check
    assert "ours on sherpa-onnx's frames: identical 3/3" in check


@pytest.mark.slow
def test_finetune_on_own_data_then_decode(user):
    run(user, "prepare")
    out = run(user, "finetune").stdout
    assert "init_from: features: the source's (" in out and "init_from: CMVN: the source's" in out
    assert "reverse_weight 0.3" in out and "re-initialized" not in out
    assert "validating (and checkpointing) at step 3" in out and "best checkpoint : None" not in out
    source, _, _ = load_model(user / "exp" / "wenet" / "model.ckpt")
    tuned = model_state_dict(torch.load(user / "exp" / "wenet_finetuned" / "checkpoints" / "last.ckpt",
                                        weights_only=True))
    r2l = [k for k, v in source.state_dict().items() if k.startswith("r2l_decoder.") and v.is_floating_point()]
    assert r2l and all(not torch.equal(tuned[k], source.state_dict()[k]) for k in r2l)
    out = run(user, "decode_finetuned").stdout
    assert "attention_rescoring" in out


def readme_section_commands(title: str) -> list[str]:
    """The commands of the README section ``title``'s bash blocks: continuations joined, comments dropped."""
    text = (ROOT / "README.md").read_text()
    section = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in section.split("```bash\n")[1:]:
        body = block.split("```", 1)[0].replace("\\\n", " ")
        commands += [" ".join(line.split("#", 1)[0].split()) for line in body.splitlines() if line.strip()]
    return commands


def test_the_readme_section_is_the_path_these_tests_run():
    """Every command a user reads in "Bring your own model and audio" is one this file runs, and back."""
    assert readme_section_commands("Bring your own model and audio (Wenet)") == list(README_COMMANDS.values())
