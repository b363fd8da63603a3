"""scripts/decode.py on a tiny trained checkpoint: JSONL per mode, a summary, and the same errors as the ablation."""

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


# The program's main(argv) in this process: a subprocess would pay torch's import again.
import asr.cli.decode as decode_script  # noqa: E402


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
        # the word errors split into substitutions, deletions and insertions, per record and in total
        for r in records:
            assert r["substitutions"] + r["deletions"] + r["insertions"] == r["word_errors"]
        split = [stats[k] for k in ("substitutions", "deletions", "insertions")]
        assert split == [sum(r[k] for r in records) for k in ("substitutions", "deletions", "insertions")]
        line = next(row for row in stdout.splitlines() if row.startswith(mode))
        assert line.endswith(f"{stats['word_errors']} of {stats['ref_words']}: {split[0]} / {split[1]} / {split[2]}")
    # Every mode scored the same references in the same order.
    assert all(r == refs["ctc_greedy"] for r in refs.values())


def default_out_dir(ckpt: Path, corpus: Path, settings: str, split: str = "test") -> Path:
    """decode.py's folder for a split of the corpus decoded with ``settings`` (its name's tail)."""
    (out,) = (ckpt.parent.parent / "decode").glob(f"{corpus.name}_cuts_{split}-*_{settings}")
    return out


def test_other_cuts_file_and_default_out_dir(trained, capsys):
    corpus, ckpt = trained
    # --ckpt stays an alias of --checkpoint for now
    decode(capsys, "--ckpt", str(ckpt), "--modes", "ctc_greedy", "--cuts", str(corpus / "cuts_dev.jsonl.gz"))
    out_dir = default_out_dir(ckpt, corpus, "full", split="dev")  # named from the input
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["modes"]["ctc_greedy"]["utterances"] == 4
    assert summary["input"]["sources"] == [str((corpus / "cuts_dev.jsonl.gz").resolve())]


def test_bad_mode_is_a_clear_error(trained, capsys):
    _, ckpt = trained
    with pytest.raises(SystemExit) as exc:
        decode_script.main(["--checkpoint", str(ckpt), "--modes", "beam_me_up"])
    assert exc.value.code == 2 and "beam_me_up" in capsys.readouterr().err


def test_segment_at_pauses_is_recorded_and_scores_every_cut_whole(trained, tmp_path, capsys):
    _, ckpt = trained
    out = tmp_path / "dec"
    stdout = decode(capsys, "--checkpoint", str(ckpt), "--modes", "ctc_greedy", "--segment-at-pauses",
                    "--min-pause", "0.2", "--out-dir", str(out))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["segments"]["min_pause_s"] == 0.2 and summary["segments"]["pieces"] >= 1
    assert summary["modes"]["ctc_greedy"]["utterances"] == 4 and "cut at pauses >= 0.2 s" in stdout
    records = [json.loads(line) for line in open(out / "ctc_greedy.jsonl")]
    assert len(records) == 4 and all("@" not in r["key"] for r in records)
    with pytest.raises(SystemExit) as exc:
        decode_script.main(["--checkpoint", str(ckpt), "--segment-at-pauses", "--max-piece", "0.1"])
    assert exc.value.code == 2 and "max_piece_s" in capsys.readouterr().err


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
    import asr.quickstart as quickstart

    _, ckpt = trained
    out = tmp_path / "test_full"
    summary = quickstart.decode(ckpt, out, "ctc_greedy", 0, 1)  # a decode.py subprocess
    assert summary == json.loads((out / "summary.json").read_text())
    assert summary["ckpt"] == str(ckpt) and summary["modes"]["ctc_greedy"]["utterances"] == 4
    assert quickstart.decode(ckpt, out, "ctc_greedy", 0, 1) == summary
    assert "found in" in capsys.readouterr().out  # the second call read the summary back


def test_quickstart_reuses_lm_results_only_for_the_same_lms(trained, tmp_path, capsys):
    from asr.data.tokenizer import load_tokenizer
    from asr.lm import lm_path, save_arpa, save_word_lm, token_names, train_token_lm, train_word_lm, word_lm_path
    from asr.quickstart import lm_paths

    import asr.quickstart as quickstart

    corpus, ckpt = trained
    tok = load_tokenizer(corpus / "tokenizer")
    texts = ["alpha bravo", "charlie delta echo"]
    lms = (save_arpa(train_token_lm(texts, tok, 2), lm_path(corpus, 2), token_names(tok)),
           save_word_lm(*train_word_lm(texts, 2), word_lm_path(corpus, 2)))
    out = tmp_path / "test_full_lm"
    summary = quickstart.decode(ckpt, out, "attention_rescoring", 0, 1, lms=lms)
    assert lm_paths(summary) == (str(lms[0]), str(lms[1]))
    capsys.readouterr()
    assert quickstart.decode(ckpt, out, "attention_rescoring", 0, 1, lms=lms) == summary
    assert "found in" in capsys.readouterr().out
    # a summary left by a token-LM-only decode (an older quickstart) is decoded again, not reused
    summary["lm"].pop("word_lm")
    (out / "summary.json").write_text(json.dumps(summary))
    again = quickstart.decode(ckpt, out, "attention_rescoring", 0, 1, lms=lms)
    assert "found in" not in capsys.readouterr().out and lm_paths(again) == (str(lms[0]), str(lms[1]))


def test_lm_option_fuses_the_beam_modes_only(trained, tmp_path, capsys):
    from asr.data.tokenizer import load_tokenizer
    from asr.lm import lm_path, save_arpa, token_names, train_token_lm

    corpus, ckpt = trained
    tok = load_tokenizer(corpus / "tokenizer")
    lm = lm_path(corpus, 3)
    save_arpa(train_token_lm(["alpha bravo", "charlie delta echo", "fox alpha"], tok, 3), lm, token_names(tok))
    plain_out = tmp_path / "plain"
    decode(capsys, "--checkpoint", str(ckpt), "--modes", "ctc_greedy,attention_rescoring", "--beam", "3",
           "--out-dir", str(plain_out))
    stdout = decode(capsys, "--checkpoint", str(ckpt), "--modes", "ctc_greedy,attention_rescoring", "--beam", "3",
                    "--lm", str(lm), "--lm-weight", "0.9", "--length-bonus", "2")
    out = default_out_dir(ckpt, corpus, "full_lm")  # the default out-dir says "with an LM"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["lm"] == {"path": str(lm), "order": 3, "weight": 0.9, "length_bonus": 2.0}
    assert "LM 3-gram, weight 0.9, length bonus 2.0" in stdout
    # greedy takes no LM: its row stays the acoustic baseline, utterance by utterance
    assert (out / "ctc_greedy.jsonl").read_text().count("\n") == 4
    strip = [{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in open(out / "ctc_greedy.jsonl")]
    plain = [{k: v for k, v in json.loads(line).items() if k != "seconds"}
             for line in open(plain_out / "ctc_greedy.jsonl")]
    assert strip == plain
    assert summary["modes"]["attention_rescoring"]["utterances"] == 4


def test_word_lm_option_is_recorded_and_decodes_beside_the_token_lm(trained, tmp_path, capsys):
    from asr.data.tokenizer import load_tokenizer
    from asr.lm import lm_path, save_arpa, save_word_lm, token_names, train_token_lm, train_word_lm, word_lm_path
    from asr.quickstart import lm_paths

    corpus, ckpt = trained
    tok = load_tokenizer(corpus / "tokenizer")
    texts = ["alpha bravo", "charlie delta echo", "fox alpha"]
    lm = save_arpa(train_token_lm(texts, tok, 3), lm_path(corpus, 3), token_names(tok))
    words = save_word_lm(*train_word_lm(texts, 2), word_lm_path(corpus, 2))
    stdout = decode(capsys, "--checkpoint", str(ckpt), "--modes", "ctc_prefix_beam,attention_rescoring", "--beam",
                    "3", "--lm", str(lm), "--word-lm", str(words), "--oov-penalty", "4")
    out = default_out_dir(ckpt, corpus, "full_lm_wordlm")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["lm"]["path"] == str(lm) and summary["lm"]["order"] == 3
    assert summary["lm"]["word_lm"] == {"path": str(words), "order": 2, "words": 7, "weight": 0.3,
                                        "word_bonus": 1.0, "oov_penalty": 4.0}
    assert "word LM 2-gram over 7 words" in stdout
    assert summary["modes"]["attention_rescoring"]["utterances"] == 4
    only_words = decode(capsys, "--checkpoint", str(ckpt), "--modes", "attention_rescoring", "--beam", "3",
                        "--word-lm", str(words), "--out-dir", str(tmp_path / "w"))
    assert "word LM 2-gram" in only_words and "LM 3-gram" not in only_words
    assert set(json.loads((tmp_path / "w" / "summary.json").read_text())["lm"]) == {"word_lm"}


@pytest.mark.parametrize("problem", ["missing", "other_tokenizer", "bad_weight"])
def test_bad_lm_is_a_clear_error(trained, tmp_path, capsys, problem):
    corpus, ckpt = trained
    args = ["--checkpoint", str(ckpt), "--modes", "attention_rescoring", "--out-dir", str(tmp_path / "o")]
    if problem == "missing":
        args += ["--lm", str(tmp_path / "none.arpa.gz")]
        expected = "language model not found"
    elif problem == "other_tokenizer":
        path = tmp_path / "other.arpa"
        path.write_text("\\data\\\nngram 1=2\n\n\\1-grams:\n-1.0\t</s>\n-1.0\tzebra\n\n\\end\\\n")
        args += ["--lm", str(path)]
        expected = "token 'zebra' is not in the tokenizer"
    else:
        from asr.data.tokenizer import load_tokenizer
        from asr.lm import save_arpa, token_names, train_token_lm

        tok = load_tokenizer(corpus / "tokenizer")
        path = save_arpa(train_token_lm(["alpha bravo"], tok, 2), tmp_path / "good.arpa", token_names(tok))
        args += ["--lm", str(path), "--lm-weight", "-1"]
        expected = "weight (-1.0) must be a finite number >= 0"
    with pytest.raises(SystemExit) as exc:
        decode_script.main(args)
    assert expected in str(exc.value.code)
    assert not (tmp_path / "o").exists()  # refused before decoding anything


def test_hotwords_option_biases_the_beam_modes_and_is_recorded(trained, tmp_path, capsys):
    corpus, ckpt = trained
    hot = tmp_path / "hot.txt"
    hot.write_text("charlie delta:3\nbravo\n", encoding="utf-8")
    stdout = decode(capsys, "--checkpoint", str(ckpt), "--modes", "ctc_greedy,attention_rescoring", "--beam", "3",
                    "--hotwords", str(hot), "--hotword-score", "1.5", "--hotword-rescore-weight", "0.5")
    out = default_out_dir(ckpt, corpus, "full_hotwords")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["hotwords"]["path"] == str(hot) and summary["hotwords"]["phrases"] == 2
    assert summary["hotwords"]["score"] == 1.5 and summary["hotwords"]["rescore_weight"] == 0.5
    assert "2 hotwords, score 1.5, rescoring keeps 0.5" in stdout
    hot.write_text("charlie\n\u65e5\u672c\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="decode: hotword .* cannot spell"):
        decode(capsys, "--checkpoint", str(ckpt), "--modes", "ctc_prefix_beam", "--hotwords", str(hot))


def test_lead_in_probe_script_prints_a_row_per_level(trained, capsys):
    corpus, ckpt = trained
    import asr.cli.probe_lead_in as probe

    assert probe.main(["--checkpoint", str(ckpt), "--cuts", str(corpus / "cuts_test.jsonl.gz"), "--max-utts", "3",
                       "--dbfs", "-70", "-50", "--seconds", "1", "--threads", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("3 utterances of ") and "lead-in 1.28 s" in lines[0]  # 2 chunks of 0.64 s
    assert lines[1].split() == ["lead-in", "fresh", "lead-in", "CMN", "restarted", "cache", "clear"]
    for line, level in zip(lines[2:], ("-70", "-50")):
        cells = line.split()
        assert cells[:2] == [level, "dBFS"] and len(cells) == 6 and all(c.endswith("%") for c in cells[2:])
    with pytest.raises(SystemExit):
        probe.main(["--checkpoint", str(ckpt), "--chunk-size", "0"])


def test_the_script_exits_0_after_a_decode(trained, tmp_path):
    """scripts/decode.py as a user runs it: main() returns the summary, which must not become the exit status."""
    import os
    import subprocess

    corpus, ckpt = trained
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "decode.py"), "--checkpoint", str(ckpt),
                           "--cuts", str(corpus / "cuts_test.jsonl.gz"), "--modes", "ctc_greedy",
                           "--out-dir", str(tmp_path / "out")], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout[-1000:] + proc.stderr[-2000:]
    assert (tmp_path / "out" / "summary.json").is_file()
