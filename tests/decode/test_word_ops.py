"""word_ops (row-vectorised) against a plain dynamic programme over (cost, insertions + deletions),
against editdistance's word errors, and on hand-made pairs."""

import editdistance
from hypothesis import given, settings
from hypothesis import strategies as st

from asr.decode.biased_wer import DEL, INS, SUB, align
from asr.decode.word_ops import WordOps, word_ops


def reference_ops(ref: list[str], hyp: list[str]) -> WordOps:
    """Cell by cell: the lexicographic minimum of (edits, insertions + deletions), carrying the counts."""
    n, m = len(ref), len(hyp)
    # cell: (edits, gaps, substitutions, deletions, insertions)
    table = [[None] * (m + 1) for _ in range(n + 1)]
    table[0][0] = (0, 0, 0, 0, 0)
    for i in range(n + 1):
        for j in range(m + 1):
            if i == j == 0:
                continue
            options = []
            if i and j:
                e, g, s, d, n_ins = table[i - 1][j - 1]
                miss = ref[i - 1] != hyp[j - 1]
                options.append((e + miss, g, s + miss, d, n_ins))
            if i:
                e, g, s, d, n_ins = table[i - 1][j]
                options.append((e + 1, g + 1, s, d + 1, n_ins))
            if j:
                e, g, s, d, n_ins = table[i][j - 1]
                options.append((e + 1, g + 1, s, d, n_ins + 1))
            table[i][j] = min(options, key=lambda cell: cell[:2])
    _, _, s, d, n_ins = table[n][m]
    return WordOps(s, d, n_ins)


words = st.lists(st.sampled_from(["a", "b", "c", "the", "cat"]), max_size=14)


@settings(max_examples=300, deadline=None)
@given(words, words)
def test_matches_the_plain_programme_and_editdistance(ref, hyp):
    ops = word_ops(ref, hyp)
    assert ops == reference_ops(ref, hyp)
    assert ops.errors == editdistance.eval(ref, hyp)
    assert ops.insertions - ops.deletions == len(hyp) - len(ref)
    # the same cost as the backtraced alignment of the biased WER, with no more gaps
    path = align(ref, hyp)
    assert ops.errors == sum(op in (SUB, DEL, INS) for op, _, _ in path)
    assert ops.insertions + ops.deletions <= sum(op in (DEL, INS) for op, _, _ in path)


def test_hand_made_pairs():
    assert word_ops("the cat sat on the mat".split(), "the cat sit on mat".split()) == WordOps(1, 1, 0)
    assert word_ops("hello world".split(), "hello world extra words".split()) == WordOps(0, 0, 2)
    assert word_ops([], "noise".split()) == WordOps(0, 0, 1)
    assert word_ops("a b".split(), []) == WordOps(0, 2, 0)
    # a misread word is a substitution, not a deletion and an insertion
    assert word_ops("a b c".split(), "a x c".split()) == WordOps(1, 0, 0)
    # a shift costs two edits either way; the count keeps substitutions
    assert word_ops("a b c d".split(), "b c d e".split()) == WordOps(0, 1, 1)
    assert (WordOps(1, 2, 3) + WordOps(1, 0, 0)).as_dict() == {"substitutions": 2, "deletions": 2, "insertions": 3}


def test_long_transcripts_align_in_one_row_of_memory():
    ref = [f"w{i % 997}" for i in range(6000)]
    hyp = ref[:2000] + ["extra"] + ref[2000:4000] + ref[4001:5000] + ["x" + w for w in ref[5000:5100]] + ref[5100:]
    assert word_ops(ref, hyp) == WordOps(100, 1, 1)
