"""scripts/decode.py on a tiny trained checkpoint: JSONL per mode and a summary."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "train"))

from tiny_corpus import CONF, make_tiny_corpus, tiny_overrides  # noqa: E402

from asr.train.run import train  # noqa: E402

MODES = ["ctc_greedy", "ctc_prefix_beam", "attention", "attention_rescoring"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    corpus = make_tiny_corpus(tmp_path_factory.mktemp("corpus"), n_train=8)
    out = tmp_path_factory.mktemp("run")
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[*tiny_overrides(corpus, out), "+trainer.enable_progress_bar=false"])
    train(cfg)
    return corpus, out / "checkpoints" / "last.ckpt"


# The script's main(argv) in this process: a subprocess would pay torch's import again.
_spec = importlib.util.spec_from_file_location("decode_script", ROOT / "scripts" / "decode.py")
decode_script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(decode_script)


def decode(capsys, *args):
    decode_script.main(list(args))
    return capsys.readouterr().out


@pytest.mark.parametrize("chunk", [0, 2])
def test_every_mode_writes_jsonl_and_summary(trained, tmp_path, capsys, chunk):
    corpus, ckpt = trained
    out = tmp_path / "dec"
    stdout = decode(capsys, "--ckpt", str(ckpt), "--modes", ",".join(MODES), "--beam", "3", "--chunk-size", str(chunk),
                  "--out-dir", str(out))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["chunk_size"] == chunk and summary["audio_seconds"] > 0
    refs = {}
    for mode in MODES:
        records = [json.loads(line) for line in open(out / f"{mode}.jsonl")]
        assert len(records) == 4  # the tiny test split
        assert {"key", "ref", "hyp", "word_errors", "ref_words", "char_errors"} <= set(records[0])
        refs[mode] = [r["ref"] for r in records]
        stats = summary["modes"][mode]
        assert stats["utterances"] == 4
        assert stats["wer"] == pytest.approx(sum(r["word_errors"] for r in records) / sum(r["ref_words"]
                                                                                       for r in records))
        assert stats["rtf"] > 0
        assert mode in stdout
    # Every mode scored the same references in the same order.
    assert all(r == refs["ctc_greedy"] for r in refs.values())


def test_other_cuts_file_and_default_out_dir(trained, capsys):
    corpus, ckpt = trained
    decode(capsys, "--ckpt", str(ckpt), "--modes", "ctc_greedy", "--cuts", str(corpus / "cuts_dev.jsonl.gz"))
    summary = json.loads((ckpt.parent.parent / "decode" / "cuts_dev_full" / "summary.json").read_text())
    assert summary["modes"]["ctc_greedy"]["utterances"] == 4


def test_bad_mode_is_a_clear_error(trained, capsys):
    _, ckpt = trained
    with pytest.raises(SystemExit) as exc:
        decode_script.main(["--ckpt", str(ckpt), "--modes", "beam_me_up"])
    assert exc.value.code == 2 and "beam_me_up" in capsys.readouterr().err


def test_help(capsys):
    with pytest.raises(SystemExit) as exc:
        decode_script.main(["--help"])
    assert exc.value.code == 0 and "attention_rescoring" in capsys.readouterr().out
