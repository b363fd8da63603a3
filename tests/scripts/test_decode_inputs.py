"""scripts/decode.py and stream.py on any audio with a tiny imported Wenet model: a folder, a Wenet
data.list, a Kaldi wav.scp (+ text) and a NeMo manifest score as the same audio in a Lhotse manifest
does; without references they write hypotheses and say that no WER was computed. No corpus, no --data-dir."""

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asr.data.importers import make_cut, make_recording
from asr.data.manifest import write_cuts
from asr.interop.wenet import import_wenet, write_checkpoint
from scripts.decode import main as decode_main
from scripts.stream import main as stream_main
from tests.interop import wenet_layout as wl

REFS = {"u1": "ab cd", "u2": "e", "u3": "bad cab"}
MODES = "ctc_greedy,attention_rescoring"


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wenet")
    cfg = wl.config()
    return write_checkpoint(import_wenet(wl.write_folder(tmp / "model", cfg, wl.state_dict(cfg))), tmp / "w.ckpt")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """rec/ with three noise files (one in a subfolder, one flac) and every manifest kind of them."""
    root = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng(1)
    paths = {"u1": "u1.wav", "u2": "u2.flac", "u3": "sub/u3.wav"}
    for key, rel in paths.items():
        (root / "rec" / rel).parent.mkdir(parents=True, exist_ok=True)
        sf.write(root / "rec" / rel, (0.3 * rng.standard_normal(int(16000 * (1.0 + 0.3 * int(key[1]))))
                                      ).astype(np.float32), 16000)
    folder_keys = {"u1": "u1", "u2": "u2", "u3": "sub/u3"}
    (root / "refs.txt").write_text("".join(f"{folder_keys[k]} {t}\n" for k, t in REFS.items()))
    (root / "rec" / "data.list").write_text("".join(
        json.dumps({"key": k, "wav": paths[k], "txt": t}) + "\n" for k, t in REFS.items()))
    (root / "rec" / "bare.list").write_text("".join(json.dumps({"key": k, "wav": paths[k]}) + "\n" for k in REFS))
    for name, with_text in (("kaldi", True), ("kaldi_bare", False)):
        (root / name).mkdir()
        (root / name / "wav.scp").write_text("".join(f"{k} {root / 'rec' / p}\n" for k, p in paths.items()))
        if with_text:
            (root / name / "text").write_text("".join(f"{k} {t}\n" for k, t in REFS.items()))
    for name, with_text in (("nemo.json", True), ("nemo_bare.json", False)):
        rows = [{"audio_filepath": paths[k], "duration": sf.info(root / "rec" / paths[k]).duration,
                 **({"text": t} if with_text else {})} for k, t in REFS.items()]
        (root / "rec" / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    cuts = []
    for key, rel in paths.items():  # Lhotse manifest in another folder, audio paths relative to it
        cut = make_cut(key, make_recording(key, root / "rec" / rel), REFS[key])
        cut.recording.sources[0].source = f"../rec/{rel}"
        cuts.append(cut)
    write_cuts(cuts, root / "lhotse" / "cuts_test.jsonl.gz")
    return root


def decode(ckpt, out, *inputs, extra=()):
    return decode_main(["--checkpoint", str(ckpt), "--modes", MODES, "--beam", "3", "--out-dir", str(out),
                        *map(str, inputs), *extra])


def scored(out: Path, mode: str) -> list[tuple[str, str]]:
    return sorted((r["ref"], r["hyp"]) for r in map(json.loads, (out / f"{mode}.jsonl").read_text().splitlines()))


def test_every_input_kind_scores_as_the_lhotse_manifest_of_the_same_audio(imported, corpus, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative audio paths must not depend on where decode.py runs
    want = decode(imported, tmp_path / "lhotse", corpus / "lhotse" / "cuts_test.jsonl.gz")
    assert want["references"] and want["modes"]["ctc_greedy"]["utterances"] == 3
    assert sum(len(h) for h, _ in scored(tmp_path / "lhotse", "ctc_greedy")) > 0  # it says something
    # The same manifest through --cuts and no --data-dir: paths resolve against its own folder.
    via_cuts = decode_main(["--checkpoint", str(imported), "--modes", MODES, "--beam", "3", "--out-dir",
                            str(tmp_path / "cuts"), "--cuts", str(corpus / "lhotse" / "cuts_test.jsonl.gz")])
    kinds = {"folder": ([corpus / "rec"], ["--text", str(corpus / "refs.txt")]),
             "wenet": ([corpus / "rec" / "data.list"], []), "kaldi": ([corpus / "kaldi" / "wav.scp"], []),
             "nemo": ([corpus / "rec" / "nemo.json"], [])}
    for name, (inputs, extra) in kinds.items():
        got = decode(imported, tmp_path / name, *inputs, extra=extra)
        for mode in MODES.split(","):
            assert scored(tmp_path / name, mode) == scored(tmp_path / "lhotse", mode), (name, mode)
            for key in ("wer", "cer", "utterances", "word_errors", "ref_words"):
                assert got["modes"][mode][key] == want["modes"][mode][key] == via_cuts["modes"][mode][key]
        assert got["skipped_utterances"] == {}


def test_without_references_hypotheses_are_written_and_no_wer_is_claimed(imported, corpus, tmp_path, capsys):
    decode(imported, tmp_path / "lhotse", corpus / "lhotse" / "cuts_test.jsonl.gz")
    want = sorted(h for _, h in scored(tmp_path / "lhotse", "attention_rescoring"))
    capsys.readouterr()
    for name, inputs in {"folder": [corpus / "rec"], "wenet": [corpus / "rec" / "bare.list"],
                         "kaldi": [corpus / "kaldi_bare"], "nemo": [corpus / "rec" / "nemo_bare.json"]}.items():
        out = tmp_path / name
        summary = decode(imported, out, *inputs)
        printed = capsys.readouterr().out
        assert not summary["references"] and summary["modes"]["ctc_greedy"]["wer"] is None
        assert "no references" in printed and "no WER computed" in printed
        records = [json.loads(line) for line in (out / "attention_rescoring.jsonl").read_text().splitlines()]
        assert all(set(r) == {"key", "hyp", "seconds"} for r in records)
        lines = (out / "attention_rescoring.text").read_text().splitlines()
        assert [line.split(" ", 1)[0] for line in lines] == [r["key"] for r in records]
        assert sorted(r["hyp"] for r in records) == want, name


def test_no_corpus_and_nothing_named_is_one_line(imported, corpus, tmp_path):
    for argv, message in ((["--checkpoint", str(imported)], "stores no data.data_dir: name what to decode"),
                          (["--checkpoint", str(imported), str(tmp_path / "nowhere")], "no such file or folder"),
                          (["--checkpoint", str(imported), str(corpus / "rec" / "data.list"), "--text",
                            str(tmp_path / "gone.txt")], "no such references file")):
        with pytest.raises(SystemExit) as exc:
            decode_main(argv)
        assert str(exc.value).startswith("decode: ") and message in str(exc.value) and "\n" not in str(exc.value)


def test_stream_scores_a_data_list_as_decode_does(imported, corpus, tmp_path, capsys):
    """Streaming a data.list: its final texts are scored, and they are decode.py's attention rescoring
    under the same chunk mask."""
    from asr.decode.wer import ErrorCounter

    assert stream_main(["--checkpoint", str(imported), "--chunk-size", "4", "--left-chunks", "2", "--beam", "3",
                        str(corpus / "rec" / "data.list"), "--out-dir", str(tmp_path / "s")]) == 0
    printed = capsys.readouterr().out
    records = [json.loads(line) for line in (tmp_path / "s" / "stream.jsonl").read_text().splitlines()]
    assert [r["key"] for r in records] == list(REFS) and [r["ref"] for r in records] == list(REFS.values())
    counter = ErrorCounter()
    for r in records:
        counter.add(r["ref"], r["hyp"])
    assert f"WER {100 * counter.wer:.2f}% CER {100 * counter.cer:.2f}% over the 3 of 3 utterances" in printed
    assert (tmp_path / "s" / "stream.text").read_text().splitlines() == [f"{r['key']} {r['hyp']}".strip()
                                                                          for r in records]
    decode(imported, tmp_path / "d", corpus / "rec" / "data.list", extra=["--chunk-size", "4", "--left-chunks", "2"])
    offline = {r["key"]: r["hyp"] for r in map(json.loads, (tmp_path / "d" / "attention_rescoring.jsonl"
                                                             ).read_text().splitlines())}
    assert {r["key"]: r["hyp"] for r in records} == offline and any(offline.values())


def _lists(root: Path, corpus: Path, refs: dict[str, dict[str, str]]) -> dict[str, Path]:
    """One data.list per name, ``refs[name]``: key -> reference, audio from the corpus."""
    paths = {"u1": "u1.wav", "u2": "u2.flac", "u3": "sub/u3.wav"}
    lists = {}
    for name, table in refs.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        lists[name] = root / name / "data.list"
        lists[name].write_text("".join(json.dumps({"key": k, "wav": str(corpus / "rec" / paths[k]), "txt": t}) + "\n"
                                       for k, t in table.items()))
    return lists


def test_two_lists_decoded_without_out_dir_get_a_folder_each(imported, corpus, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    ckpt = run / "model.ckpt"
    ckpt.write_bytes(imported.read_bytes())
    lists = _lists(tmp_path / "data", corpus, {"test": {"u1": REFS["u1"], "u3": REFS["u3"]}, "dev": {"u2": REFS["u2"]}})
    decode_main(["--checkpoint", str(ckpt), "--modes", "ctc_greedy", str(lists["test"])])
    (test_dir,) = (run / "decode").iterdir()
    before = {p.name: p.read_bytes() for p in test_dir.iterdir()}
    decode_main(["--checkpoint", str(ckpt), "--modes", "attention_rescoring", str(lists["dev"])])
    folders = sorted((run / "decode").iterdir())
    assert len(folders) == 2 and test_dir in folders
    assert {p.name: p.read_bytes() for p in test_dir.iterdir()} == before  # the test results untouched
    for folder in folders:
        summary = json.loads((folder / "summary.json").read_text())
        name = "test" if folder == test_dir else "dev"
        assert summary["input"] == {"sources": [str(lists[name].resolve())], "text": None}
        assert folder.name.startswith(f"{name}_data-") and folder.name.endswith("_full")
    # the same list decoded again goes to its own folder again; scored otherwise, to a folder beside it
    decode_main(["--checkpoint", str(ckpt), "--modes", "ctc_greedy", str(lists["test"])])
    assert len(list((run / "decode").iterdir())) == 2
    before = {p.name: p.read_bytes() for p in test_dir.iterdir()}
    decode_main(["--checkpoint", str(ckpt), "--modes", "ctc_greedy", str(lists["test"]), "--case-sensitive"])
    assert (run / "decode" / f"{test_dir.name}_cased" / "summary.json").is_file()
    assert {p.name: p.read_bytes() for p in test_dir.iterdir()} == before


def test_an_out_dir_holding_another_inputs_results_is_refused(imported, corpus, tmp_path):
    lists = _lists(tmp_path / "data", corpus, {"test": {"u1": REFS["u1"]}, "dev": {"u2": REFS["u2"]}})
    out = tmp_path / "out"
    decode(imported, out, lists["test"])
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(SystemExit) as exc:
        decode(imported, out, lists["dev"])
    message = str(exc.value)
    assert "holds the results of another input" in message and str(lists["test"].resolve()) in message
    assert "\n" not in message
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert decode(imported, out, lists["test"])["input"]["sources"] == [str(lists["test"].resolve())]  # its own: fine


def test_case_and_punctuation_are_normalized_alike_and_recorded(imported, corpus, tmp_path, capsys):
    def greedy(out, data_list, *extra):
        return decode_main(["--checkpoint", str(imported), "--modes", "ctc_greedy", "--out-dir", str(out),
                            str(data_list), *extra])

    greedy(tmp_path / "bare", corpus / "rec" / "bare.list")
    hyps = {r["key"]: r["hyp"] for r in map(json.loads, (tmp_path / "bare" / "ctc_greedy.jsonl").read_text().splitlines())}
    assert any(hyps.values()) and all(h == h.lower() for h in hyps.values())  # the char model writes lower case
    # references as a cased, punctuated corpus writes what the model said
    shouted = {k: f"\u201c{h.upper()}!\u201d" for k, h in hyps.items() if h}
    lists = _lists(tmp_path / "data", corpus, {"shouted": shouted})
    capsys.readouterr()
    default = greedy(tmp_path / "default", lists["shouted"])["modes"]["ctc_greedy"]
    assert default["wer"] == 0.0 and default["cer"] == 0.0 and "case_only_word_errors" not in default
    assert json.loads((tmp_path / "default" / "summary.json").read_text())["scoring"] == {
        "case_sensitive": False, "keep_punctuation": False,
        "rule": "case folded, punctuation removed, applied to references and hypotheses alike"}
    assert "scoring: case folded, punctuation removed" in capsys.readouterr().out
    cased = greedy(tmp_path / "cased", lists["shouted"], "--case-sensitive")
    err = capsys.readouterr().err
    totals = cased["modes"]["ctc_greedy"]
    assert cased["scoring"]["case_sensitive"] and not cased["scoring"]["keep_punctuation"]
    assert totals["wer"] == 1.0 and totals["case_only_word_errors"] == totals["word_errors"] > 0
    assert (f"warning: ctc_greedy: {totals['word_errors']} of its {totals['word_errors']} word errors differ from "
            "the reference in case only") in err
    exact = greedy(tmp_path / "exact", lists["shouted"], "--case-sensitive", "--keep-punctuation")["modes"]["ctc_greedy"]
    # the quotes and "!" stick to the first and last words: those are more than case differences
    assert exact["word_errors"] == totals["word_errors"] and exact["case_only_word_errors"] < totals["word_errors"]
    assert exact["char_errors"] == totals["char_errors"] + 3 * len(shouted)


def test_a_list_decode_warns_nothing_about_its_progress_bar(imported, corpus, tmp_path):
    import warnings

    from tqdm import TqdmWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        decode(imported, tmp_path / "out", corpus / "rec" / "data.list")  # 4.74 s of frames in all
    assert [str(w.message) for w in caught if issubclass(w.category, TqdmWarning)] == []


def test_audio_shorter_than_a_frame_is_a_counted_skip_in_stream_as_in_decode(imported, corpus, tmp_path, capsys):
    tiny = tmp_path / "tiny.wav"
    sf.write(tiny, np.zeros(8, dtype=np.int16), 16000, subtype="PCM_16")
    assert tiny.stat().st_size == 60
    good = corpus / "rec" / "u1.wav"
    assert stream_main(["--checkpoint", str(imported), "--chunk-size", "4", str(tiny), str(good)]) == 0
    out, err = capsys.readouterr()
    assert out.count("  final: ") == 1 and "== u1.wav" in out and "== tiny.wav" not in out
    assert "tiny.wav: 8 samples, shorter than one fbank frame" in err and "skipped entries: audio_too_short 1" in out
    summary = decode(imported, tmp_path / "d", tiny, good)
    assert summary["skipped_utterances"] == {"audio_too_short": 1}
