"""compare_runs: two runs' decodes paired per utterance, the difference and its interval."""

import json

import numpy as np
import pytest

from asr.ablation.stats import paired_difference
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
