"""Clean copies (asr.synth.clean_copy): one synthesis written as the room copy the profile always wrote and
as a clean copy that is exactly the profile-without-surroundings' utterance; rebuilt without the option, no
clean copy is left behind. eSpeak-only profiles here (the neural voices take minutes to load): the copy
logic does not look at the engine."""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest
import soundfile as sf

from asr.data.manifest import read_cuts
from asr.synth import corpus
from asr.synth.capture import TRAIN_RANGES
from asr.synth.clean_copy import CLEAN_MANIFEST, CLEAN_SPLIT, clean_copy_id
from asr.synth.corpus import SynthConfig, build_synth_corpus
from asr.synth.profiles import PROFILES, ROOM_RANGES, SynthProfile

TINY = dict(seed=5, workers=1, train_hours=0.003, dev_hours=0.0, test_hours=0.0, long_hours=0.0)
BASE = SynthProfile(varied_voices=False, conditions=None, capture=TRAIN_RANGES, capture_share=0.5)
ROOMS = dataclasses.replace(BASE, conditions=ROOM_RANGES, edge_silence_s=(0.05, 0.6))
CURRICULUM = dataclasses.replace(ROOMS, clean_copy=True)


@pytest.fixture
def tiny_profiles(monkeypatch):
    for name, profile in {"t_base": BASE, "t_rooms": ROOMS, "t_rooms_cur": CURRICULUM}.items():
        monkeypatch.setitem(PROFILES, name, profile)


def _digests(folder, names):
    return {n: hashlib.sha256((folder / n).read_bytes()).hexdigest() for n in names}


def _room_files(folder):
    return ["cuts_train.jsonl.gz", *sorted(p.relative_to(folder).as_posix()
                                           for p in (folder / "audio" / "train").glob("*.flac"))]


def test_room_copies_stay_and_clean_copies_are_the_profile_without_surroundings(tiny_profiles, tmp_path):
    quiet = dict(log=lambda *_: None)
    built = tmp_path / "cur"
    summary = build_synth_corpus(SynthConfig(str(built), profile="t_rooms_cur", **TINY), **quiet)
    room_files = _room_files(built)
    with_copies = _digests(built, room_files)
    rooms = list(read_cuts(built / "cuts_train.jsonl.gz"))
    clean = list(read_cuts(built / CLEAN_MANIFEST))
    assert len(rooms) >= 2 and summary["splits"][CLEAN_SPLIT]["utterances"] == len(rooms)
    assert [c.id for c in clean] == [clean_copy_id(c.id) for c in rooms]
    assert [c.supervisions[0].text for c in clean] == [c.supervisions[0].text for c in rooms]
    assert all(c.recording.sources[0].source.endswith(f"/audio/{CLEAN_SPLIT}/{c.id}.flac") for c in clean)
    # no edge silence: every clean copy is shorter than its room copy
    assert all(a.duration < b.duration for a, b in zip(clean, rooms))

    # the same utterances from the profile without surroundings: the clean copies, sample for sample
    base_dir = tmp_path / "base"
    build_synth_corpus(SynthConfig(str(base_dir), profile="t_base", **TINY), **quiet)
    base = {c.id: c for c in read_cuts(base_dir / "cuts_train.jsonl.gz")}
    compared = [(c, base[r.id]) for c, r in zip(clean, rooms) if r.id in base]
    assert len(compared) >= 2
    assert any(b.custom["conditions"] != "none" for _, b in compared) or len(compared) == len(clean)
    for copy, made in compared:
        assert copy.custom["conditions"] == made.custom["conditions"]  # the same capture path drawn
        assert copy.supervisions[0].text == made.supervisions[0].text
        a, _ = sf.read(copy.recording.sources[0].source, dtype="int16")
        b, _ = sf.read(made.recording.sources[0].source, dtype="int16")
        np.testing.assert_array_equal(a, b)

    # rebuilt without the option (the profile changed): the room copies byte for byte, no clean copy left
    build_synth_corpus(SynthConfig(str(built), profile="t_rooms", **TINY), **quiet)
    assert _room_files(built) == room_files and _digests(built, room_files) == with_copies
    assert not (built / CLEAN_MANIFEST).exists() and not (built / "audio" / CLEAN_SPLIT).exists()
    assert CLEAN_SPLIT not in corpus.summarize_corpus(built)["splits"]


def test_a_missing_clean_manifest_rebuilds_the_train_split(tiny_profiles, tmp_path, monkeypatch):
    built = tmp_path / "cur"
    logged = []
    build_synth_corpus(SynthConfig(str(built), profile="t_rooms_cur", **TINY), log=logged.append)
    (built / CLEAN_MANIFEST).unlink()
    build_synth_corpus(SynthConfig(str(built), profile="t_rooms_cur", **TINY), log=logged.append)
    assert any("clean copies" in line and "rebuilding" in line for line in logged)
    assert (built / CLEAN_MANIFEST).is_file()


def test_the_curriculum_profile_is_the_rooms_profile_with_clean_copies():
    rooms = PROFILES["neural_hibari_capture30_rooms"]
    curriculum = PROFILES["neural_hibari_capture30_rooms_curriculum"]
    assert curriculum == dataclasses.replace(rooms, clean_copy=True) and not rooms.clean_copy
    assert curriculum.without_surroundings() == PROFILES["neural_hibari_capture30"]
    assert not curriculum.for_split("dev").clean_copy  # evaluation splits stay clean, one copy
    with pytest.raises(ValueError, match="clean_copy needs surroundings"):
        dataclasses.replace(PROFILES["neural_hibari_capture30"], clean_copy=True)
