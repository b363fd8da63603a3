"""scripts/prepare_data.py (asr/prepare.py) end to end on an imported Wenet list (char units)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from asr import prepare
from asr.data.tokenizer import load_tokenizer
from asr.lm import DEFAULT_LM_ORDER, DEFAULT_WORD_LM_ORDER, lm_path, load_token_lm, load_word_lm, word_lm_path
from asr.prepare import PrepareError, PrepareOptions, prepare_corpus
from tones import write_tone

ROOT = Path(__file__).resolve().parents[2]


def test_prepare_wenet_corpus(tmp_path, capsys):
    for split, n in (("train", 3), ("dev", 1)):
        rows = []
        for i in range(n):
            write_tone(tmp_path / "src" / f"{split}{i}.wav", 0.6 + 0.1 * i, freq=200 + 50 * i)
            rows.append(json.dumps({"key": f"{split}{i}", "wav": f"{split}{i}.wav", "txt": f"hello {split} {i}"}))
        (tmp_path / "src" / f"{split}.list").write_text("\n".join(rows) + "\n")
    out = tmp_path / "out"
    prepare_corpus(PrepareOptions(
        corpus="wenet", src=[f"train={tmp_path / 'src' / 'train.list'}", f"dev={tmp_path / 'src' / 'dev.list'}"],
        data_dir=str(out), units="char", workers=0,
    ))
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



def test_a_segmented_wenet_list_is_prepared_and_trained_on_its_segments_only(tmp_path):
    from asr.data.dataset import AsrDataset
    from asr.data.features import FbankExtractor
    from asr.data.manifest import read_cuts

    write_tone(tmp_path / "src" / "long.wav", 2.8, freq=150)
    rows = [{"key": "a", "wav": "long.wav", "txt": "hello there", "start": 0.0, "end": 1.0},
            {"key": "b", "wav": "long.wav", "txt": "good day", "start": 1.5, "end": 2.0},
            {"key": "gone", "wav": "long.wav", "txt": "nothing", "start": 3.5, "end": 4.0}]
    (tmp_path / "src" / "train.list").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    prepare_corpus(PrepareOptions(corpus="wenet", src=[f"train={tmp_path / 'src' / 'train.list'}"],
                                  data_dir=str(out), units="char", workers=0))
    cuts = read_cuts(out / "cuts_train.jsonl.gz")
    assert [(c.id, c.start, c.duration) for c in cuts] == [("a", 0.0, 1.0), ("b", 1.5, 0.5)]
    # the CMVN statistics count the segments' frames (98 + 48), not the file's twice
    assert json.loads((out / "cmvn.json").read_text())["frames"] == 98 + 48
    batch, skipped, seconds = AsrDataset(load_tokenizer(out / "tokenizer"), FbankExtractor())[cuts]
    assert skipped == [] and seconds == 1.5 and sorted(batch.feat_lens.tolist()) == [48, 98]
    # many-node training reads Shar shards: they hold the segments' samples, not the file's
    from lhotse import CutSet

    from asr.data.audio import cut_waveform
    from asr.data.shar import write_shar

    write_shar(cuts, tmp_path / "shar", shard_size=10)
    shar = list(CutSet.from_shar(in_dir=tmp_path / "shar"))
    assert all(torch.equal(cut_waveform(a), cut_waveform(b)) for a, b in zip(shar, cuts, strict=True))
    assert [cut_waveform(c).numel() for c in shar] == [16000, 8000]

def test_xengine_is_refused_for_an_imported_corpus():
    with pytest.raises(ValueError, match="--xengine renders the synth corpus"):
        PrepareOptions(corpus="wenet", xengine=True)
    done = subprocess.run([sys.executable, "scripts/prepare_data.py", "--corpus", "wenet", "--xengine"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--xengine renders the synth corpus" in done.stderr


def test_xengine_without_flite_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(prepare, "flite_path", lambda: None)
    prepare.prepare_xengine(tmp_path, force=False)
    assert "xengine: skipped, flite is not installed: install flite with `apt-get install -y flite`" in \
        capsys.readouterr().out
    assert not (tmp_path / "cuts_xengine.jsonl.gz").exists()


def test_biasing_flags(tmp_path):
    with pytest.raises(ValueError, match="--biasing builds sentences of the synth corpus"):
        PrepareOptions(corpus="wenet", biasing=True, src=["x"])
    with pytest.raises(PrepareError, match="needs the train transcripts"):
        prepare_corpus(PrepareOptions(biasing_only=True, data_dir=str(tmp_path / "empty"),
                                      biasing_dir=str(tmp_path / "b")))
    assert not (tmp_path / "b").exists()


def test_biasing_only_builds_the_benchmark_and_touches_nothing_else(tmp_path, monkeypatch):
    """--biasing-only used to go on into the corpus steps: tokenizer, LMs and CMVN rewritten."""
    called = []
    monkeypatch.setattr(prepare, "prepare_biasing", lambda args, out: called.append(out))

    def no_rebuild(*args, **kwargs):
        raise AssertionError("the corpus steps ran")

    monkeypatch.setattr(prepare, "build_synth_corpus", no_rebuild)
    monkeypatch.setattr(prepare, "compute_cmvn", no_rebuild)
    prepare_corpus(PrepareOptions(biasing_only=True, data_dir=str(tmp_path), biasing_dir=str(tmp_path / "b")))
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
    prepare_corpus(PrepareOptions(corpus="kaldi", src=[f"test={src}"], data_dir=str(out), workers=0))
    assert sorted(p.name for p in out.iterdir()) == ["cuts_test.jsonl.gz", "cuts_test.jsonl.gz.stats.json"]
    printed = capsys.readouterr().out
    assert "no train split" in printed and "--cuts" in printed


def test_a_missing_source_is_one_line(tmp_path):
    for corpus, src in (("wenet", f"test={tmp_path / 'nope.list'}"), ("kaldi", f"test={tmp_path}")):
        with pytest.raises(PrepareError) as exc:
            prepare_corpus(PrepareOptions(corpus=corpus, src=[src], data_dir=str(tmp_path / "out")))
        assert str(exc.value).startswith("prepare_data: ") and "\n" not in str(exc.value)
