"""scripts/decode.py on a tiny trained checkpoint: JSONL per mode, a summary, and the same errors as the ablation."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "train"))

from tiny_corpus import CONF, make_tiny_corpus, tiny_overrides  # noqa: E402

from asr.ablation.evaluate import WER_SETTINGS, EvalConfig, evaluate_checkpoint  # noqa: E402
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
    stdout = decode(capsys, "--checkpoint", str(ckpt), "--modes", ",".join(MODES), "--beam", "3", "--chunk-size", str(chunk),
                  "--out-dir", str(out))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["chunk_size"] == chunk and summary["audio_seconds"] > 0
    assert summary["skipped_utterances"] == {} and "skipped cuts: none" in stdout
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
    # --ckpt stays an alias of --checkpoint for now
    decode(capsys, "--ckpt", str(ckpt), "--modes", "ctc_greedy", "--cuts", str(corpus / "cuts_dev.jsonl.gz"))
    summary = json.loads((ckpt.parent.parent / "decode" / "cuts_dev_full" / "summary.json").read_text())
    assert summary["modes"]["ctc_greedy"]["utterances"] == 4


def test_bad_mode_is_a_clear_error(trained, capsys):
    _, ckpt = trained
    with pytest.raises(SystemExit) as exc:
        decode_script.main(["--checkpoint", str(ckpt), "--modes", "beam_me_up"])
    assert exc.value.code == 2 and "beam_me_up" in capsys.readouterr().err


def test_help(capsys):
    with pytest.raises(SystemExit) as exc:
        decode_script.main(["--help"])
    assert exc.value.code == 0 and "attention_rescoring" in capsys.readouterr().out


def test_decode_script_and_ablation_score_each_utterance_alike(trained, tmp_path, capsys):
    """One evaluation path: every ablation WER column on the test split equals decode.py's per utterance."""
    corpus, ckpt = trained
    metrics, errors, eval_data = evaluate_checkpoint(ckpt, EvalConfig(data_dir=str(corpus)), tmp_path / "ablation",
                                                     log=lambda _: None)
    assert eval_data["test"] == {"cuts": "cuts_test.jsonl.gz", "max_utts": None, "utterances": 4, "skipped": {}}
    # The tiny corpus has no probe set: only the probe columns fail, each with the reason.
    assert "error" in eval_data["probe"] and all(errors[f"wer_probe{s}_full"] for s in (5, 160))
    compared = 0
    for column, (mode, split, chunk, left) in WER_SETTINGS.items():
        if split != "test":
            continue
        out = tmp_path / column
        decode(capsys, "--checkpoint", str(ckpt), "--modes", mode, "--chunk-size", str(chunk), "--left-chunks",
               str(left), "--out-dir", str(out))
        ours = [json.loads(line) for line in open(out / f"{mode}.jsonl")]
        theirs = [json.loads(line) for line in open(tmp_path / "ablation" / f"decode_{column}.jsonl")]
        fields = ("key", "ref", "hyp", "word_errors", "ref_words", "char_errors")
        assert [[r[f] for f in fields] for r in ours] == [[r[f] for f in fields] for r in theirs], column
        summary = json.loads((out / "summary.json").read_text())
        assert metrics[column] == pytest.approx(100 * summary["modes"][mode]["wer"])
        compared += 1
    assert compared == 6  # rescore and greedy at full context, greedy at four chunk sizes


def test_quickstart_decodes_through_decode_script_and_reuses_its_summary(trained, tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("quickstart_script", ROOT / "scripts" / "quickstart.py")
    quickstart = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quickstart)
    _, ckpt = trained
    out = tmp_path / "test_full"
    summary = quickstart.decode(ckpt, out, "ctc_greedy", 0, 1)  # a decode.py subprocess
    assert summary == json.loads((out / "summary.json").read_text())
    assert summary["ckpt"] == str(ckpt) and summary["modes"]["ctc_greedy"]["utterances"] == 4
    assert quickstart.decode(ckpt, out, "ctc_greedy", 0, 1) == summary
    assert "found in" in capsys.readouterr().out  # the second call read the summary back
