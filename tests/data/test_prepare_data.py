"""scripts/prepare_data.py end to end on an imported Wenet list (char units)."""

import importlib.util
import json
from pathlib import Path

from asr.data.tokenizer import load_tokenizer
from asr.lm import DEFAULT_LM_ORDER, DEFAULT_WORD_LM_ORDER, lm_path, load_token_lm, load_word_lm, word_lm_path
from conftest import write_tone

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "prepare_data.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("prepare_data", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_prepare_wenet_corpus(tmp_path, capsys):
    for split, n in (("train", 3), ("dev", 1)):
        rows = []
        for i in range(n):
            write_tone(tmp_path / "src" / f"{split}{i}.wav", 0.6 + 0.1 * i, freq=200 + 50 * i)
            rows.append(json.dumps({"key": f"{split}{i}", "wav": f"{split}{i}.wav", "txt": f"hello {split} {i}"}))
        (tmp_path / "src" / f"{split}.list").write_text("\n".join(rows) + "\n")
    out = tmp_path / "out"
    _load_script().main([
        "--corpus", "wenet", "--src", f"train={tmp_path / 'src' / 'train.list'}",
        f"dev={tmp_path / 'src' / 'dev.list'}", "--data-dir", str(out), "--units", "char", "--workers", "0",
    ])
    assert (out / "cuts_train.jsonl.gz").is_file() and (out / "cuts_dev.jsonl.gz").is_file()
    tok = load_tokenizer(out / "tokenizer")
    assert tok.decode(tok.encode("hello train 2")) == "hello train 2"
    cmvn = json.loads((out / "cmvn.json").read_text())
    assert len(cmvn["mean"]) == len(cmvn["istd"]) == 80 and cmvn["frames"] == 58 + 68 + 78
    printed = capsys.readouterr().out
    assert "tokenizer: CharTokenizer" in printed
    # the token LM of the train transcripts loads with the same tokenizer and knows their sentences
    assert f"lm: {DEFAULT_LM_ORDER}-gram" in printed
    lm = load_token_lm(lm_path(out), tok)
    seen, reversed_ = tok.encode("hello train 1"), tok.encode("1 niart olleh")
    assert lm.sentence_logprob(seen) > lm.sentence_logprob(reversed_) + 5.0
    # and the word LM: its vocabulary (the decoding lexicon) is the train split's words, <unk> added
    assert f"lm: {DEFAULT_WORD_LM_ORDER}-gram over 6 words" in printed
    word_lm, words = load_word_lm(word_lm_path(out))
    assert sorted(words[:-1]) == sorted(["<unk>", "hello", "train", "0", "1", "2"]) and words[-1] == "</s>"
    ids = {w: i for i, w in enumerate(words)}
    assert word_lm.logprob([ids["hello"]], ids["train"]) > word_lm.logprob([ids["hello"]], ids["hello"]) + 1.0


def test_xengine_is_refused_for_an_imported_corpus(capsys):
    import pytest

    with pytest.raises(SystemExit):
        _load_script().parse_args(["--corpus", "wenet", "--xengine"])
    assert "--xengine renders the synth corpus" in capsys.readouterr().err


def test_xengine_without_flite_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    script = _load_script()
    monkeypatch.setattr(script, "flite_path", lambda: None)
    script.prepare_xengine(tmp_path, force=False)
    assert "xengine: skipped, flite is not installed: install flite with `apt-get install -y flite`" in \
        capsys.readouterr().out
    assert not (tmp_path / "cuts_xengine.jsonl.gz").exists()


def test_biasing_flags(tmp_path, capsys):
    import pytest

    prepare = _load_script()
    with pytest.raises(SystemExit):
        prepare.parse_args(["--corpus", "wenet", "--biasing", "--src", "x"])
    assert "--biasing builds sentences of the synth corpus" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="needs the train transcripts"):
        prepare.main(["--biasing-only", "--data-dir", str(tmp_path / "empty"), "--biasing-dir", str(tmp_path / "b")])
    assert not (tmp_path / "b").exists()


def test_biasing_only_builds_the_benchmark_and_touches_nothing_else(tmp_path, monkeypatch):
    """--biasing-only used to go on into the corpus steps: tokenizer, LMs and CMVN rewritten."""
    prepare = _load_script()
    called = []
    monkeypatch.setattr(prepare, "prepare_biasing", lambda args, out: called.append(out))

    def no_rebuild(*args, **kwargs):
        raise AssertionError("the corpus steps ran")

    monkeypatch.setattr(prepare, "build_synth_corpus", no_rebuild)
    monkeypatch.setattr(prepare, "compute_cmvn", no_rebuild)
    prepare.main(["--biasing-only", "--data-dir", str(tmp_path), "--biasing-dir", str(tmp_path / "b")])
    assert called == [tmp_path]
    assert not (tmp_path / "tokenizer").exists() and not (tmp_path / "cmvn.json").exists()


def test_a_test_only_corpus_is_built_without_tokenizer_lm_or_cmvn(tmp_path, capsys):
    """A corpus to decode needs no train split (a checkpoint carries its own tokenizer, fbank and CMVN)."""
    src = tmp_path / "kaldi_test"
    src.mkdir()
    write_tone(src / "u0.wav", 0.6, freq=300)
    (src / "wav.scp").write_text(f"u0 {src / 'u0.wav'}\n")
    (src / "text").write_text("u0 hello test\n")
    out = tmp_path / "out"
    _load_script().main(["--corpus", "kaldi", "--src", f"test={src}", "--data-dir", str(out), "--workers", "0"])
    assert sorted(p.name for p in out.iterdir()) == ["cuts_test.jsonl.gz", "cuts_test.jsonl.gz.stats.json"]
    printed = capsys.readouterr().out
    assert "no train split" in printed and "--cuts" in printed


def test_a_missing_source_is_one_line(tmp_path):
    import pytest

    for corpus, src in (("wenet", f"test={tmp_path / 'nope.list'}"), ("kaldi", f"test={tmp_path}")):
        with pytest.raises(SystemExit) as exc:
            _load_script().main(["--corpus", corpus, "--src", src, "--data-dir", str(tmp_path / "out")])
        assert str(exc.value).startswith("prepare_data: ") and "\n" not in str(exc.value)
