"""compare_runs: two runs' decodes paired per utterance, the difference and its interval."""

import json

import numpy as np
import pytest

from asr.ablation.stats import paired_difference, seeded_paired_difference
from asr.evaluation.compare_runs import compare_runs, comparison_table, main


def write_decode(run, folder, mode, rows):
    path = run / "decode" / folder / f"{mode}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"key": k, "word_errors": e, "ref_words": w, "hyp": "x"}) + "\n"
                            for k, e, w in rows))


def test_the_difference_is_paired_on_the_utterances_both_runs_scored(tmp_path):
    rng = np.random.default_rng(0)
    words = rng.integers(3, 15, size=60)
    base_errors = rng.integers(0, 3, size=60)
    other_errors = base_errors + (np.arange(60) % 4 == 0)  # one more error in every fourth utterance
    base, other = tmp_path / "base", tmp_path / "other"
    write_decode(base, "test_full", "ctc_greedy", [(f"u{i}", int(base_errors[i]), int(words[i])) for i in range(60)])
    # the other run skipped u0 and lists its utterances in another order; a decode only it has is left out
    write_decode(other, "test_full", "ctc_greedy",
                 [(f"u{i}", int(other_errors[i]), int(words[i])) for i in reversed(range(1, 60))])
    write_decode(other, "test_chunk16", "ctc_greedy", [("u1", 0, 5)])
    (rows,) = compare_runs(base, other, replicates=300)
    assert (rows.decode, rows.mode, rows.utterances) == ("test_full", "ctc_greedy", 59)
    kept = slice(1, 60)
    assert rows.base_wer == pytest.approx(100 * base_errors[kept].sum() / words[kept].sum())
    assert rows.other_wer == pytest.approx(100 * other_errors[kept].sum() / words[kept].sum())
    expected = paired_difference(other_errors[kept], base_errors[kept], words[kept], replicates=300).scaled(100)
    assert rows.difference == expected and rows.difference.difference > 0 and rows.difference.resolved
    table = comparison_table([rows], "base", "other")
    assert "| test_full | ctc_greedy | 59 |" in table and f"{expected.difference:+.2f}" in table


def test_bad_input_is_a_clear_error(tmp_path, capsys):
    base, other = tmp_path / "base", tmp_path / "other"
    write_decode(base, "test_full", "ctc_greedy", [("u1", 1, 5)])
    with pytest.raises(SystemExit, match="decode the run first"):
        main([str(base), str(other)])
    (other / "decode" / "test_full").mkdir(parents=True)
    (other / "decode" / "test_full" / "ctc_greedy.jsonl").write_text('{"key": "u1"}\n')
    with pytest.raises(SystemExit, match="needs key, word_errors and ref_words"):
        main([str(base), str(other)])
    write_decode(other, "test_full", "ctc_greedy", [("u1", 1, 6)])  # another test set
    with pytest.raises(SystemExit, match="reference word counts differ"):
        main([str(base), str(other)])
    write_decode(other, "test_full", "ctc_greedy", [("u1", 0, 5)])
    main([str(base), str(other), "--replicates", "50"])
    assert "| test_full | ctc_greedy | 1 | 20.00 | 0.00 |" in capsys.readouterr().out


def test_several_runs_a_side_pool_their_seeds_and_draw_them_in_the_interval(tmp_path, capsys):
    rng = np.random.default_rng(1)
    words = rng.integers(3, 15, size=50)
    errors = {name: rng.integers(0, 4, size=50) for name in ("a1", "a2", "b1", "b2")}
    for name, errs in errors.items():
        write_decode(tmp_path / name, "test_full", "attention_rescoring",
                     [(f"u{i}", int(errs[i]), int(words[i])) for i in range(50)])
    (row,) = compare_runs([tmp_path / "a1", tmp_path / "a2"], [tmp_path / "b1", tmp_path / "b2"], replicates=300)
    base, other = np.stack([errors["a1"], errors["a2"]]), np.stack([errors["b1"], errors["b2"]])
    assert row.runs == (2, 2) and row.utterances == 50
    assert row.base_wer == pytest.approx(100 * base.mean(0).sum() / words.sum())
    assert row.other_wer == pytest.approx(100 * other.mean(0).sum() / words.sum())
    expected = seeded_paired_difference(other, base, words, replicates=300).scaled(100)
    assert row.difference == expected and row.difference.seed_sd > 0
    # one seed's interval covers the utterances only; the two seeds' draws widen it
    single = compare_runs(tmp_path / "a1", tmp_path / "b1", replicates=300)[0].difference
    assert single.seed_sd is None and (expected.high - expected.low) > 0
    main([f"{tmp_path / 'a1'},{tmp_path / 'a2'}", f"{tmp_path / 'b1'},{tmp_path / 'b2'}", "--replicates", "300"])
    out = capsys.readouterr().out
    assert "| a1+a2 WER % | b1+b2 WER % |" in out and "sd: utterances / seeds" in out
    assert f"{expected.utterance_sd:.2f} / {expected.seed_sd:.2f} |" in out and "2 and 2 runs a side" in out
    with pytest.raises(ValueError, match="at least one run folder"):
        compare_runs([], tmp_path / "b1")
