"""The padding benchmark (asr/bench/padding.py) on the tiny corpus through the recipe's config: its accounting."""

import pytest

from asr.bench.padding import epoch_paddings, main, padding_table, recipe_datamodule
from asr.data.manifest import read_cuts
from asr.data.tokenizer import write_char_units


@pytest.fixture(scope="module")
def overrides(tiny_corpus, tmp_path_factory):
    texts = [c.supervisions[0].text for c in read_cuts(tiny_corpus / "cuts_train.jsonl.gz")]
    units = write_char_units(texts, tmp_path_factory.mktemp("units"))
    return ["experiment=quickstart", f"data.data_dir={tiny_corpus}", f"data.tokenizer_path={units}",
            "data.feature_store=null", "data.max_duration=8.0", "data.max_duration_per_utt=6.0",
            "data.lead_in_prob=1.0", "data.lead_in_max_s=1.0", "data.lead_in_from_epoch=1"]


def test_lead_ins_pad_duration_batches_and_drawn_length_batches_count_them(overrides):
    plain = epoch_paddings(recipe_datamodule([*overrides, "data.batch_by_drawn_length=false"]), [0, 1])
    drawn = epoch_paddings(recipe_datamodule([*overrides, "data.batch_by_drawn_length=true"]), [0, 1])
    assert plain[0] == drawn[0]  # no lead-in before epoch 1: the same batches
    assert plain[0].rows_s == pytest.approx(plain[0].speech_s)
    assert plain[1].rows == drawn[1].rows and plain[1].speech_s == pytest.approx(drawn[1].speech_s)  # every cut once
    assert plain[1].rows_s == pytest.approx(drawn[1].rows_s) and plain[1].rows_s > plain[1].speech_s  # same lead-ins
    # max_duration bounds the padded batch by drawn length; the lead-ins push one past it by duration
    assert drawn[1].largest_padded_s <= 8.0 + 1e-6 < plain[1].largest_padded_s
    assert drawn[1].padding_share < plain[1].padding_share and drawn[1].padded_s < plain[1].padded_s
    table = padding_table({"duration": plain, "drawn length": drawn}).splitlines()
    assert len(table) == 2 + 4 and table[2].startswith("| duration | 0 |")


def test_the_command_prints_the_table_and_the_ratios(overrides, capsys):
    main(["--epochs", "1", *overrides])
    out = capsys.readouterr().out
    assert "| drawn length | 1 |" in out
    ratio = float(out.split("padded seconds per batch, drawn length / duration = ")[1].split(";")[0])
    assert 0 < ratio < 1
