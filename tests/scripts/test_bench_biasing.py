"""scripts/bench_biasing.py end to end on a tiny random model and a hand-made biasing split (a smoke run)."""

import json
from pathlib import Path

import soundfile as sf
from lhotse import Recording

from asr.data.features import SAMPLE_RATE
from asr.data.importers import make_cut
from asr.data.manifest import write_cuts
from tests.serve.helpers import noise, save_checkpoint

ROOT = Path(__file__).resolve().parents[2]
TEXTS = ["abc de fgh", "de fgh", "fgh abc", "de"]


def load_bench():
    import asr.cli.bench_biasing

    return asr.cli.bench_biasing


def test_prints_the_table_and_writes_every_number(tmp_path, capsys):
    ckpt = save_checkpoint(tmp_path)
    cuts = []
    for i, text in enumerate(TEXTS):
        wav = tmp_path / f"u{i}.wav"
        sf.write(wav, noise(1.0 + 0.2 * i, i, SAMPLE_RATE).numpy(), SAMPLE_RATE)
        cuts.append(make_cut(f"biasing_test-{i:06d}", Recording.from_file(wav), text))
    write_cuts(cuts, tmp_path / "cuts_biasing_test.jsonl.gz")
    write_cuts(cuts, tmp_path / "cuts_plain.jsonl.gz")
    (tmp_path / "biasing").mkdir()
    pool = ["bad", "cab", "hag", "fad", "gag", "dab"]
    lines = [json.dumps({"id": c.id, "biased": [t.split()[0]], "distractors": pool}) for c, t in zip(cuts, TEXTS)]
    (tmp_path / "biasing" / "biasing_test_lists.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "biasing" / "false_alarm.txt").write_text("bad\ncab\n")
    out = tmp_path / "results.json"
    rc = load_bench().main(["--checkpoint", str(ckpt), "--biasing-dir", str(tmp_path), "--sizes", "0,3",
                            "--scores", "1,2", "--rescore-weights", "0,1", "--beam", "3", "--compile-lists", "2",
                            "--false-alarm-cuts", str(tmp_path / "cuts_plain.jsonl.gz"), "--out", str(out)])
    stdout = capsys.readouterr().out
    assert rc == 0
    rows = [line.split("|") for line in stdout.splitlines() if line.startswith("| none |")]
    assert [(r[2].strip(), r[3].strip()) for r in rows[:5]] == [("none", "-"), ("N=0", "1"), ("N=3", "1"),
                                                                 ("N=0", "2"), ("N=3", "2")]
    results = json.loads(out.read_text())
    assert len(results["rows"]) == 5 and results["utterances"] == 4
    none = results["rows"][0]
    assert none["ctc"]["biased_words"] == 4 and set(none["rescored"]) == {"0.0", "1.0"}
    assert results["compile_ms"]["median_cpu"] >= 0 and "search_ratio" in results["cost_none"]
    # the false-alarm set keeps only utterances without a list word: all four here
    assert [r["list"] for r in results["false_alarm"]] == ["none", "2 rare words"]
    assert "false alarms: 4 ordinary utterances" in stdout
