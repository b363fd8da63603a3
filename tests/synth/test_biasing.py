"""The biasing benchmark corpus: rare words absent from train, lists as Le et al., deterministic."""

from __future__ import annotations

import json

from lhotse import CutSet

from asr.evaluation.biasing import read_lists, utterance_list
from asr.synth.biasing import NUM_DISTRACTORS, lists_path, product_words, rare_pool, build_biasing_sets

TRAIN = ["call anna at seven", "we moved to reykjavik in nineteen ninety", "thaddeus bought a lamp"] * 3


def test_pool_leaves_out_words_the_train_transcripts_hold():
    pool = rare_pool(TRAIN, seed=0)
    assert "reykjavik" not in pool.places and "thaddeus" not in pool.names
    assert "timbuktu" in pool.places and "ignatius" in pool.names
    assert len(pool.products) == len(product_words(0)) and len(pool.words) > NUM_DISTRACTORS
    assert "anna" not in pool.words  # the everyday names never count as rare
    assert rare_pool(TRAIN + ["timbuktu"], max_train_count=1).places == pool.places
    assert "timbuktu" not in rare_pool(TRAIN + ["timbuktu"]).places


def test_build_is_deterministic_and_lists_follow_the_recipe(tmp_path):
    sizes = {"biasing_test": 3, "biasing_dev": 2}
    built = build_biasing_sets(tmp_path / "a", TRAIN, seed=1, workers=1, utterances=sizes)
    build_biasing_sets(tmp_path / "b", TRAIN, seed=1, workers=1, utterances=sizes)
    for split, count in sizes.items():
        assert len(built[split]) == count
        a, b = (lists_path(tmp_path / d, split).read_text() for d in "ab")
        assert a == b
        for d in "ab":
            assert (tmp_path / d / "audio" / split / f"{split}-000000.flac").is_file()
        assert [c.supervisions[0].text for c in CutSet.from_file(tmp_path / "a" / f"cuts_{split}.jsonl.gz")] == \
            [c.supervisions[0].text for c in CutSet.from_file(tmp_path / "b" / f"cuts_{split}.jsonl.gz")]
    pool = set((tmp_path / "a" / "biasing" / "pool.txt").read_text().split())
    lists = read_lists(lists_path(tmp_path / "a", "biasing_test"))
    for cut in built["biasing_test"]:
        entry = lists[cut.id]
        words = cut.supervisions[0].text.split()
        assert entry["biased"] and set(entry["biased"]) == {w for w in words if w in pool}
        assert len(entry["distractors"]) == NUM_DISTRACTORS and not set(entry["distractors"]) & set(words)
        assert utterance_list(entry, 100)[:len(entry["biased"])] == entry["biased"]
        assert utterance_list(entry, 100) == utterance_list(entry, 500)[:len(entry["biased"]) + 100]
        assert cut.custom["voice"].split("+")[1] in {"m6", "m8", "f3", "f5", "klatt4", "quincy", "michel", "iven"}
    false_alarm = (tmp_path / "a" / "biasing" / "false_alarm.txt").read_text().split()
    assert len(false_alarm) == NUM_DISTRACTORS and set(false_alarm) <= pool
    assert json.loads(lists_path(tmp_path / "a", "biasing_dev").read_text().splitlines()[0])["id"] == \
        "biasing_dev-000000"
