"""The input readers (asr/data/inputs.py): every kind of source a user has, told apart by name and
content, relative paths from the naming file's folder, references optional, bad entries counted."""

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asr.data.importers import make_cut, make_recording
from asr.data.inputs import InputError, detect_kind, read_inputs, stream_items
from asr.data.manifest import write_cuts

TEXTS = {"a/one": "alpha bravo", "a/b/two": "charlie", "three": "delta echo fox"}


@pytest.fixture()
def audio(tmp_path) -> Path:
    """Three files under rec/ (two in subfolders; wav, flac, mp3) and a text file that is not audio."""
    root = tmp_path / "rec"
    rng = np.random.default_rng(0)
    for key, suffix in zip(TEXTS, (".wav", ".flac", ".mp3")):
        path = root / f"{key}{suffix}"
        path.parent.mkdir(parents=True, exist_ok=True)
        sf.write(path, (0.1 * rng.standard_normal(12000)).astype(np.float32), 16000)
    (root / "notes.txt").write_text("not audio")
    return root


def texts(inputs):
    return {c.id: (c.supervisions[0].text if c.supervisions else None) for c in inputs.cuts}


def test_a_folder_is_searched_recursively_and_keyed_by_relative_path(audio):
    inputs = read_inputs([audio])
    assert sorted(c.id for c in inputs.cuts) == sorted(TEXTS) and inputs.kinds == ["audio"]
    assert not inputs.references and not inputs.skipped
    assert all(abs(c.duration - 0.75) < 0.01 for c in inputs.cuts)  # mp3 included, as soundfile reads it


def test_a_text_file_gives_references_and_one_without_them_is_skipped_and_counted(audio, tmp_path):
    refs = tmp_path / "refs.txt"
    refs.write_text("".join(f"{k} {t}\n" for k, t in TEXTS.items()))
    assert texts(read_inputs([audio], refs)) == TEXTS
    refs.write_text("a/one alpha\n")
    partial = read_inputs([audio], refs)
    assert partial.references and texts(partial) == {"a/one": "alpha"}
    assert partial.skipped == Counter(no_transcript=2)


def test_a_wenet_list_resolves_paths_from_its_folder_and_counts_bad_lines(audio, tmp_path):
    lines = [json.dumps({"key": k.replace("/", "_"), "wav": str(next(audio.glob(f"{k}.*")).relative_to(audio)),
                         "txt": t}) for k, t in TEXTS.items()]
    lines += ["{not json", json.dumps({"key": "gone", "wav": "gone.wav", "txt": "x"})]
    (audio / "data.list").write_text("\n".join(lines) + "\n")
    inputs = read_inputs([audio / "data.list"])
    assert inputs.kinds == ["wenet"] and inputs.references
    assert texts(inputs) == {k.replace("/", "_"): t for k, t in TEXTS.items()}
    assert inputs.skipped == Counter(bad_manifest_line=1, audio_missing=1)
    no_txt = audio / "plain.list"
    no_txt.write_text(json.dumps({"key": "one", "wav": "a/one.wav"}) + "\n")
    assert not read_inputs([no_txt]).references


def test_a_wav_scp_takes_the_text_beside_it_when_there_is_one(audio, tmp_path):
    kaldi = tmp_path / "kaldi"
    kaldi.mkdir()
    files = {k.replace("/", "-"): next(audio.glob(f"{k}.*")) for k in TEXTS}
    (kaldi / "wav.scp").write_text("".join(f"{k} {p}\n" for k, p in files.items()) + "piped sox x.wav -t wav - |\n")
    unscored = read_inputs([kaldi / "wav.scp"])
    assert unscored.kinds == ["kaldi"] and not unscored.references and len(unscored.cuts) == 3
    assert unscored.skipped == Counter(unsupported_wav_command=1)
    (kaldi / "text").write_text("".join(f"{k.replace('/', '-')} {t}\n" for k, t in TEXTS.items()))
    scored = read_inputs([kaldi])  # the data folder works as well as its wav.scp
    assert scored.references and texts(scored) == {k.replace("/", "-"): t for k, t in TEXTS.items()}


def test_nemo_and_lhotse_manifests(audio, tmp_path):
    rows = [{"audio_filepath": str(p.relative_to(audio)), "duration": 0.75, "text": "x"} for p in
            sorted(audio.rglob("*.wav"))]
    (audio / "manifest.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    nemo = read_inputs([audio / "manifest.json"])
    assert nemo.kinds == ["nemo"] and nemo.references and len(nemo.cuts) == 1
    # A Lhotse manifest whose audio paths are relative to its own folder, read from elsewhere.
    cut = make_cut("one", make_recording("one", audio / "a" / "one.wav"), "alpha bravo")
    cut.recording.sources[0].source = "a/one.wav"
    write_cuts([cut], audio / "cuts_test.jsonl.gz")
    lhotse = read_inputs([audio / "cuts_test.jsonl.gz"])
    assert lhotse.kinds == ["lhotse"] and lhotse.cuts[0].recording.sources[0].source == str(audio / "a" / "one.wav")


def test_what_cannot_be_read_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "odd.csv").write_text("a,b\n")
    for source, message in ((tmp_path / "nowhere", "no such file or folder"),
                            (tmp_path / "empty", "no audio files"), (tmp_path / "odd.csv", "cannot tell what it is")):
        with pytest.raises(InputError, match=message) as err:
            detect_kind(source) if source.name != "empty" else read_inputs([source])
        assert "\n" not in str(err.value)


def test_a_wenet_shard_list_is_named_and_told_what_to_give_instead(tmp_path):
    from asr.data.importers import CorpusFormatError, import_wenet
    from asr.prepare import PrepareError, PrepareOptions, prepare_corpus

    shards = tmp_path / "data.list"
    shards.write_text("".join(f"/data/shards/shards_{i:09d}.tar\n" for i in range(3)))
    urls = tmp_path / "urls.list"
    urls.write_text("https://example.org/shards/shards_000000000.tar.gz?token=x\n")
    for source in (shards, urls):
        with pytest.raises(InputError, match="a Wenet shard list") as err:
            read_inputs([source])
        assert "raw data.list" in str(err.value) and "make_raw_list.py" in str(err.value)
        assert "\n" not in str(err.value)
    with pytest.raises(CorpusFormatError, match="a Wenet shard list"):
        import_wenet(shards)
    with pytest.raises(PrepareError, match="a Wenet shard list"):
        prepare_corpus(PrepareOptions(corpus="wenet", src=[f"train={shards}"], data_dir=str(tmp_path / "out")))


def test_repeated_keys_are_counted_not_kept_twice(audio):
    # Keys are relative to each source: a/one.wav named alone is "one", and so is it in the folder a/.
    inputs = read_inputs([audio, audio / "a" / "one.wav", audio / "a"])
    assert [c.id for c in inputs.cuts] == ["a/b/two", "a/one", "three", "one", "b/two"]
    assert inputs.skipped == Counter(duplicate_key=1)


def test_stream_items_keep_a_named_audio_file_even_when_it_is_missing(audio, tmp_path):
    found = stream_items([tmp_path / "missing.wav", audio / "a", tmp_path / "nowhere"])
    assert [i.name for i in found.items] == ["missing.wav", "b/two", "one"]
    assert len(found.errors) == 1 and "nowhere" in found.errors[0]
    with pytest.raises(ValueError, match="not found"):
        found.items[0].load()
    assert found.items[2].load().shape == (12000,)
