import json
from collections import Counter

import pytest
import torch

from asr.data.audio import cut_waveform
from asr.data.importers import import_aishell, import_kaldi, import_librispeech, import_nemo, import_wenet
from tones import write_tone


def test_wenet(tmp_path):
    write_tone(tmp_path / "wav" / "a.wav", 1.0)
    write_tone(tmp_path / "wav" / "b.wav", 0.5, sr=8000)
    lines = [
        json.dumps({"key": "a", "wav": "wav/a.wav", "txt": "hello  world"}),
        json.dumps({"key": "b", "wav": str(tmp_path / "wav" / "b.wav"), "txt": "good day"}),
        json.dumps({"key": "c", "wav": "wav/missing.wav", "txt": "gone"}),
        "{not json",
    ]
    (tmp_path / "data.list").write_text("\n".join(lines) + "\n")
    skipped = Counter()
    cuts = import_wenet(tmp_path / "data.list", skipped)
    assert sorted(cuts.ids) == ["a", "b"]
    assert cuts["a"].supervisions[0].text == "hello world" and cuts["a"].duration == pytest.approx(1.0)
    assert cuts["b"].recording.sampling_rate == 8000 and cuts["b"].duration == pytest.approx(0.5)
    assert skipped == {"audio_missing": 1, "bad_manifest_line": 1}


def _segment_list(tmp_path, entries):
    (tmp_path / "data.list").write_text("".join(json.dumps(e) + "\n" for e in entries))
    skipped = Counter()
    return import_wenet(tmp_path / "data.list", skipped), skipped


def test_wenet_start_and_end_are_a_segment_of_the_file(tmp_path):
    data = write_tone(tmp_path / "long.wav", 2.8, freq=0.1)  # rises over the file: no two spans match
    cuts, skipped = _segment_list(tmp_path, [
        {"key": "whole", "wav": "long.wav", "txt": "all of it"},
        {"key": "first", "wav": "long.wav", "txt": "one", "start": 0.0, "end": 1.0},
        {"key": "inner", "wav": "long.wav", "txt": "two", "start": 1.25, "end": 2.0},
        {"key": "ragged", "wav": "long.wav", "txt": "three", "start": 0.12345, "end": 0.98765},
        {"key": "overshoot", "wav": "long.wav", "txt": "four", "start": 2.5, "end": 3.0},  # within 0.5 s
    ])
    assert skipped == {}
    assert cuts["whole"].duration == pytest.approx(2.8)
    assert (cuts["first"].start, cuts["first"].duration) == (0.0, 1.0)
    assert cuts["first"].supervisions[0].duration == 1.0 and cuts["first"].supervisions[0].text == "one"
    assert (cuts["inner"].start, cuts["inner"].duration) == (1.25, 0.75)
    expected = {"first": (0, 16000), "inner": (20000, 32000), "ragged": (1975, 15802), "overshoot": (40000, 44800)}
    for key, (first, last) in expected.items():  # int(t * rate), as Wenet reads the samples
        wav = cut_waveform(cuts[key])
        assert wav.shape == (last - first,), key
        assert torch.allclose(wav, torch.from_numpy(data[first:last, 0]).float(), atol=1e-4), key


def test_wenet_segments_outside_the_file_or_empty_are_counted_skips(tmp_path):
    write_tone(tmp_path / "a.wav", 2.0)
    cuts, skipped = _segment_list(tmp_path, [
        {"key": "ok", "wav": "a.wav", "txt": "kept", "start": 0.5, "end": 1.5},
        {"key": "backwards", "wav": "a.wav", "txt": "x", "start": 1.5, "end": 0.5},
        {"key": "empty", "wav": "a.wav", "txt": "x", "start": 1.0, "end": 1.0},
        {"key": "after", "wav": "a.wav", "txt": "x", "start": 2.5, "end": 3.0},
        {"key": "far", "wav": "a.wav", "txt": "x", "start": 1.0, "end": 2.6},  # 0.6 s past the end
        {"key": "negative", "wav": "a.wav", "txt": "x", "start": -0.5, "end": 1.0},
        {"key": "half", "wav": "a.wav", "txt": "x", "start": 0.5},  # Wenet reads start and end together
        {"key": "words", "wav": "a.wav", "txt": "x", "start": "0.5", "end": "1.0"},
    ])
    assert list(cuts.ids) == ["ok"]
    assert skipped == {"bad_segment": 5, "bad_manifest_line": 2}


def _write_kaldi_tables(folder, **tables):
    """One file per keyword: wav_scp="..." writes folder/wav.scp."""
    for name, text in tables.items():
        (folder / name.replace("_", ".")).write_text(text)


def test_kaldi_with_segments(tmp_path):
    write_tone(tmp_path / "r1.wav", 3.0)
    _write_kaldi_tables(
        tmp_path, wav_scp=f"r1 {tmp_path / 'r1.wav'}\nr2 sox x.wav -t wav - |\n",
        segments="u1 r1 0.0 1.0\nu2 r1 1.5 3.0\nu3 r2 0 1\nu4 r1 0 1\n",
        text="u1 first part\nu2 second part\nu3 piped\n", utt2spk="u1 spk1\nu2 spk2\n",
    )
    skipped = Counter()
    cuts = import_kaldi(tmp_path, skipped)
    assert sorted(cuts.ids) == ["u1", "u2"]
    assert (cuts["u2"].start, cuts["u2"].duration) == (1.5, 1.5)
    assert cuts["u2"].supervisions[0].speaker == "spk2"
    assert cuts["u2"].load_audio().shape == (1, 24000)
    assert skipped == {"unsupported_wav_command": 1, "no_transcript": 1}


def test_kaldi_segment_end_is_a_time_not_a_duration(tmp_path):
    # start > 0 and end well inside the recording: reading the end column as a
    # duration would give 2.0 s here, not the 1.0 s between the two times
    data = write_tone(tmp_path / "r1.wav", 4.0, freq=0.1)  # rises over the first 2.5 s: no two windows match
    _write_kaldi_tables(
        tmp_path, wav_scp="r1 r1.wav\n", text="mid a\ntail b\nempty c\npast d\n",
        segments="mid r1 1.0 2.0\ntail r1 2.5 -1\nempty r1 2.0 2.0\npast r1 4.5 5.0\n",
    )
    skipped = Counter()
    cuts = import_kaldi(tmp_path, skipped)
    assert sorted(cuts.ids) == ["mid", "tail"]
    assert (cuts["mid"].start, cuts["mid"].duration) == (1.0, 1.0)
    assert cuts["mid"].supervisions[0].duration == 1.0
    assert (cuts["tail"].start, cuts["tail"].duration) == (2.5, 1.5)
    wav = cut_waveform(cuts["mid"])
    assert torch.allclose(wav, torch.from_numpy(data[16000:32000, 0]).float(), atol=1e-4)
    assert skipped == {"bad_segment": 2}


def test_kaldi_without_segments(tmp_path):
    write_tone(tmp_path / "x.flac", 1.0)
    _write_kaldi_tables(tmp_path, wav_scp="x x.flac\n", text="x one two\n")
    cuts = import_kaldi(tmp_path)
    assert list(cuts.ids) == ["x"] and cuts["x"].duration == pytest.approx(1.0)
    with pytest.raises(FileNotFoundError, match="wav.scp"):
        import_kaldi(tmp_path / "nowhere")


def test_nemo_with_offset(tmp_path):
    write_tone(tmp_path / "a" / "long.wav", 4.0)
    (tmp_path / "a" / "bad.wav").write_bytes(b"\x00" * 10)
    rows = [
        {"audio_filepath": "a/long.wav", "duration": 1.0, "text": "one"},
        {"audio_filepath": "a/long.wav", "duration": 2.0, "offset": 2.0, "text": "two"},
        {"audio_filepath": "a/bad.wav", "duration": 1.0, "text": "bad"},
        {"audio_filepath": "a/long.wav", "text": "no duration"},
    ]
    (tmp_path / "m.json").write_text("\n".join(json.dumps(r) for r in rows))
    skipped = Counter()
    cuts = import_nemo(tmp_path / "m.json", skipped)
    assert list(cuts.ids) == ["long", "long-1"]
    assert (cuts["long-1"].start, cuts["long-1"].duration) == (2.0, 2.0)
    assert cuts["long-1"].supervisions[0].text == "two"
    assert skipped == {"audio_corrupt": 1, "bad_manifest_line": 1}


def test_librispeech(tmp_path):
    for split, spk, chapter, utts in [("train-clean-5", "19", "198", 2), ("dev-clean", "84", "121", 1)]:
        folder = tmp_path / split / spk / chapter
        lines = []
        for i in range(utts):
            utt = f"{spk}-{chapter}-{i:04d}"
            write_tone(folder / f"{utt}.flac", 0.5 + i * 0.25)
            lines.append(f"{utt} SOME WORDS NUMBER {i}")
        (folder / f"{spk}-{chapter}.trans.txt").write_text("\n".join(lines) + "\n")
    splits = import_librispeech(tmp_path)
    assert sorted(splits) == ["dev-clean", "train-clean-5"]
    train = splits["train-clean-5"]
    assert sorted(train.ids) == ["19-198-0000", "19-198-0001"]
    assert train["19-198-0001"].duration == pytest.approx(0.75)
    assert train["19-198-0001"].supervisions[0].text == "SOME WORDS NUMBER 1"
    assert train["19-198-0001"].supervisions[0].speaker == "19"


def test_aishell(tmp_path):
    (tmp_path / "transcript").mkdir()
    (tmp_path / "transcript" / "aishell_transcript_v0.8.txt").write_text(
        "BAC009S0002W0122 而 对 楼市 成交 抑制 作用\nBAC009S0764W0121 甚至 出现 交易\n", encoding="utf-8"
    )
    write_tone(tmp_path / "wav" / "train" / "S0002" / "BAC009S0002W0122.wav", 1.0)
    write_tone(tmp_path / "wav" / "train" / "S0002" / "BAC009S0002W0999.wav", 1.0)  # no transcript
    write_tone(tmp_path / "wav" / "test" / "S0764" / "BAC009S0764W0121.wav", 0.5)
    skipped = Counter()
    splits = import_aishell(tmp_path, skipped)
    assert sorted(splits) == ["test", "train"]
    assert list(splits["train"].ids) == ["BAC009S0002W0122"]
    assert splits["train"]["BAC009S0002W0122"].supervisions[0].text == "而对楼市成交抑制作用"
    assert splits["test"]["BAC009S0764W0121"].supervisions[0].speaker == "S0764"
    assert skipped == {"no_transcript": 1}
