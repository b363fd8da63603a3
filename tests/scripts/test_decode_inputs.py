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
