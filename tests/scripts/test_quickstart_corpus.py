"""The quickstart rebuilds a corpus made with another synth profile than the default (asr/quickstart.py)."""

import json

import pytest

from asr import quickstart
from asr.synth.clean_copy import CLEAN_MANIFEST
from asr.synth.noise_bank import NOISE_BANK_MANIFEST
from asr.synth.profiles import DEFAULT_PROFILE, PROFILES


def test_corpus_ready_needs_every_file_and_the_default_profile(tmp_path):
    for name in quickstart.CORPUS_FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    assert not quickstart.corpus_ready(tmp_path)  # no manifest_summary.json: unknown profile
    for profile in PROFILES:
        (tmp_path / "manifest_summary.json").write_text(json.dumps({"profile": profile}))
        assert quickstart.corpus_ready(tmp_path) == (profile == DEFAULT_PROFILE)
        assert quickstart.corpus_ready(tmp_path, profile)
        assert not any(quickstart.corpus_ready(tmp_path, other) for other in PROFILES if other != profile)
    # a summary from before profiles existed describes a clean corpus
    (tmp_path / "manifest_summary.json").write_text(json.dumps({"corpus": "synth"}))
    assert quickstart.corpus_ready(tmp_path) == (DEFAULT_PROFILE == "clean")
    (tmp_path / "manifest_summary.json").write_text(json.dumps({"profile": DEFAULT_PROFILE}))
    (tmp_path / "cmvn.json").unlink()
    assert not quickstart.corpus_ready(tmp_path)


def test_a_run_of_another_corpus_is_never_reused(tmp_path, capsys):
    corpus = tmp_path / "synth"
    (corpus / "tokenizer").mkdir(parents=True)
    (corpus / "cuts_train.jsonl.gz").write_bytes(b"train v1")
    (corpus / "tokenizer" / "bpe256.model").write_bytes(b"tok v1")
    (corpus / "manifest_summary.json").write_text(json.dumps({"profile": "neural_hibari"}))
    conf = tmp_path / "conf"
    (conf / "experiment").mkdir(parents=True)
    (conf / "experiment" / "quickstart.yaml").write_text("model: {}\n")
    first = quickstart.corpus_fingerprint(corpus, conf)
    assert first["profile"] == "neural_hibari" and first["data_dir"] == str(corpus)

    run = tmp_path / "exp" / "quickstart_rel_xl"
    assert quickstart.choose_run_dir(run, first) == run  # nothing there yet
    run.mkdir(parents=True)
    (run / quickstart.CORPUS_STAMP).write_text(json.dumps(first))
    assert quickstart.choose_run_dir(run, first) == run  # the same corpus: reuse or resume
    assert quickstart.choose_run_dir(run, quickstart.corpus_fingerprint(corpus, conf)) == run

    # another recipe (a config file changed) trains anew too, and says so
    (conf / "experiment" / "quickstart.yaml").write_text("model: {encoder: {online_cmn_frames: 100}}\n")
    other = quickstart.choose_run_dir(run, quickstart.corpus_fingerprint(corpus, conf))
    assert other != run and "holds a run of another recipe (conf/)" in capsys.readouterr().out
    (run / quickstart.CORPUS_STAMP).write_text(json.dumps(quickstart.corpus_fingerprint(corpus, conf)))

    for change in ("train", "tokenizer", "profile"):
        if change == "train":
            (corpus / "cuts_train.jsonl.gz").write_bytes(b"train v2")
        elif change == "tokenizer":
            (corpus / "tokenizer" / "bpe256.model").write_bytes(b"tok v2")
        else:
            (corpus / "manifest_summary.json").write_text(json.dumps({"profile": "clean"}))
        other = quickstart.choose_run_dir(run, quickstart.corpus_fingerprint(corpus, conf))
        assert other != run and other.name.startswith("quickstart_rel_xl_") and other.parent == run.parent, change
        assert "holds a run of another corpus" in capsys.readouterr().out

    # a run from before the stamp existed: kept, with a warning that says how to start over
    old = tmp_path / "exp" / "old"
    (old / "checkpoints").mkdir(parents=True)
    assert quickstart.choose_run_dir(old, first) == old
    assert "use --retrain" in capsys.readouterr().out


def test_a_decode_summary_is_reused_only_for_the_same_checkpoint_and_lms(tmp_path):
    lms = (tmp_path / "lm.arpa.gz", tmp_path / "word_lm")
    assert quickstart.reusable_summary(tmp_path, tmp_path / "a.ckpt", lms) is None  # nothing decoded yet
    summary = {"ckpt": str(tmp_path / "a.ckpt"), "lm": {"path": str(lms[0]), "word_lm": {"path": str(lms[1])}}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    assert quickstart.reusable_summary(tmp_path, tmp_path / "a.ckpt", lms) == summary
    assert quickstart.reusable_summary(tmp_path, tmp_path / "b.ckpt", lms) is None
    assert quickstart.reusable_summary(tmp_path, tmp_path / "a.ckpt") is None  # decoded with LMs, wanted without
    summary["lm"].pop("word_lm")  # token LM only
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    assert quickstart.reusable_summary(tmp_path, tmp_path / "a.ckpt", lms) is None


def test_the_recipe_follows_the_profile_and_the_default_corpus_gets_the_room_curriculum():
    from omegaconf import OmegaConf

    from asr.train.config import repository_conf_dir

    assert quickstart.recipe_for(DEFAULT_PROFILE) == "quickstart_rooms"
    for name, profile in PROFILES.items():
        assert quickstart.recipe_for(name) == ("quickstart_rooms" if profile.clean_copy else "quickstart")
    assert quickstart.recipe_for("neural_hibari_capture30") == "quickstart"
    with pytest.raises(ValueError, match="unknown synth profile 'nope'"):
        quickstart.recipe_for("nope")
    # the room recipe reads the clean copies the default profile writes
    rooms = OmegaConf.load(repository_conf_dir() / "experiment" / "quickstart_rooms.yaml")
    assert PROFILES[DEFAULT_PROFILE].clean_copy and rooms.data.curriculum_cuts == CLEAN_MANIFEST
    # ... and the noise bank prepare_data writes, which a corpus must have to count as ready
    assert rooms.data.background.noise_cuts == NOISE_BANK_MANIFEST and NOISE_BANK_MANIFEST in quickstart.CORPUS_FILES


@pytest.mark.parametrize("recipe", ["quickstart", "quickstart_rooms"])
def test_each_quickstart_recipe_ends_on_a_validation_and_its_cosine_at_the_last_step(recipe):
    from asr.bench.padding import recipe_config

    config = recipe_config([f"experiment={recipe}"])
    # the averaged model takes the best validated checkpoints, and the last step's is one of them
    assert config.trainer.max_steps % config.trainer.val_check_interval == 0
    assert config.optim.scheduler.total_steps is None  # the cosine ends at trainer.max_steps
    # the room recipe caps its batches by their drawn lengths (lead-ins included) and spends the frames
    # that saves on steps; the clean recipe has no lead-ins to count
    assert config.data.batch_by_drawn_length == (recipe == "quickstart_rooms")
