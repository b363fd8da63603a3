"""Scoring the live benchmark: what a session's finals say about each of its sentences.

Inputs are plain data: a session's reference sentences with their speech spans in stream
seconds, and what the connection heard (:class:`Heard`): its finals in order, each with
its words (times in stream seconds, from the final's word pieces) and its segment (the
stream span the utterance decoded), and per utterance the audio the client had sent
when the utterance's first words arrived.

Words to sentences (:func:`align`): the session's final texts, concatenated, against the
concatenated references, by one minimum-edit-distance alignment, so its errors are
exactly the session WER's. Among alignments with the fewest errors it takes the one whose
matched and substituted words lie nearest in time to the speech of the sentence they are
aligned to (a word's distance from that sentence's span, summed): a word repeated at a
sentence boundary ("... in the | the next ...") goes to the sentence it was spoken in.
Text first, time only to break ties: word times from a streaming CTC alignment run late by
up to a chunk and a fused word spans two sentences, so times alone would misplace words,
while the text alone leaves such ties to chance. An inserted word counts against the
sentence nearest in time (the sentence before it when it has no time).

Endpoints (:func:`gap_outcomes`): each final after the first starts where the previous
utterance handed over (its segment start: the chunk at which the endpoint fired). For the
gap before sentence j (j >= 1) the outcome is ``clean`` when an utterance starts in the
pause (between the end of sentence j-1's speech and sentence j's onset), ``late`` when none
does but one starts inside sentence j's speech (the speech before it went to the previous
final, and with it usually the first word), ``fused`` when no utterance starts between
the two sentences' speech at all (two sentences in one final). An utterance start inside
a sentence's speech that is not that sentence's late start is a ``split``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

GAP_OUTCOMES = ("clean", "late", "fused")


@dataclass(frozen=True)
class Word:
    """A hypothesis word with its stream times in seconds (None: not known)."""

    text: str
    start_s: float | None = None
    end_s: float | None = None

    @property
    def mid_s(self) -> float | None:
        return None if self.start_s is None or self.end_s is None else (self.start_s + self.end_s) / 2


@dataclass(frozen=True)
class Final:
    """One final result: its words, and the stream span (seconds) its utterance decoded."""

    words: tuple[Word, ...]
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Heard:
    """What one connection heard. ``first_words_s[u]``: audio seconds the client had sent when
    utterance u's first non-empty result arrived (None: none had words, or not paced)."""

    finals: tuple[Final, ...]
    first_words_s: tuple[float | None, ...]

    def __post_init__(self) -> None:
        if len(self.first_words_s) != len(self.finals):
            raise ValueError(f"first_words_s has {len(self.first_words_s)} entries for {len(self.finals)} finals")

    @property
    def words(self) -> list[Word]:
        return [w for f in self.finals for w in f.words]


@dataclass(frozen=True)
class Alignment:
    """Per reference word: ``ok``, ``sub`` or ``del``; its sentence; errors per sentence (insertions included)."""

    ops: tuple[str, ...]
    sentence_of: tuple[int, ...]
    sentence_errors: tuple[int, ...]

    @property
    def errors(self) -> int:
        return sum(self.sentence_errors)

    def first_word_ok(self, sentence: int) -> bool:
        """The sentence's first reference word was recognized (matched)."""
        return self.ops[self.sentence_of.index(sentence)] == "ok"


def _distance(word: Word, span: tuple[float, float]) -> float:
    mid = word.mid_s
    if mid is None:
        return 0.0
    return max(span[0] - mid, 0.0, mid - span[1])


def align(refs: list[str], spans: list[tuple[float, float]], hyp: list[Word]) -> Alignment:
    """Align the words of ``hyp`` to the concatenated ``refs`` (sentences with their speech
    ``spans``, stream seconds); see the module docstring for the rule."""
    if len(refs) != len(spans):
        raise ValueError(f"{len(refs)} references for {len(spans)} speech spans")
    ref = [(w, s) for s, text in enumerate(refs) for w in text.split()]
    n, m = len(ref), len(hyp)
    inf = (float("inf"), float("inf"))
    cost = [[inf] * (m + 1) for _ in range(n + 1)]
    move = [[""] * (m + 1) for _ in range(n + 1)]
    cost[0][0] = (0, 0.0)
    for i in range(n + 1):
        for j in range(m + 1):
            if i == j == 0:
                continue
            best, how = inf, ""
            if i and j:
                e, p = cost[i - 1][j - 1]
                word, s = ref[i - 1]
                cand = (e + (word != hyp[j - 1].text), p + _distance(hyp[j - 1], spans[s]))
                best, how = cand, "diag"
            if i:
                e, p = cost[i - 1][j]
                if (e + 1, p) < best:
                    best, how = (e + 1, p), "del"
            if j:
                e, p = cost[i][j - 1]
                if (e + 1, p) < best:
                    best, how = (e + 1, p), "ins"
            cost[i][j], move[i][j] = best, how
    ops: list[str] = [""] * n
    errors = [0] * len(refs)
    inserted: list[tuple[int, Word]] = []  # (index of the reference word before it, word)
    i, j = n, m
    while i or j:
        how = move[i][j]
        if how == "diag":
            ops[i - 1] = "ok" if ref[i - 1][0] == hyp[j - 1].text else "sub"
            i, j = i - 1, j - 1
        elif how == "del":
            ops[i - 1] = "del"
            i -= 1
        else:
            inserted.append((i - 1, hyp[j - 1]))
            j -= 1
    for k, op in enumerate(ops):
        errors[ref[k][1]] += op != "ok"
    for before, word in inserted:
        if word.mid_s is not None:
            errors[min(range(len(spans)), key=lambda s: _distance(word, spans[s]))] += 1
        else:
            errors[ref[before][1] if before >= 0 else 0] += 1
    return Alignment(tuple(ops), tuple(s for _, s in ref), tuple(errors))


def gap_outcomes(spans: list[tuple[float, float]], starts: list[float]) -> tuple[list[str], int]:
    """(outcome of the gap before each sentence j >= 1, splits) given the sentences' speech ``spans``
    and the stream times where utterances after the first start (see the module docstring)."""
    outcomes = []
    late = set()
    for j in range(1, len(spans)):
        (_, prev_end), (onset, end) = spans[j - 1], spans[j]
        if any(prev_end <= t <= onset for t in starts):
            outcomes.append("clean")
            continue
        inside = [t for t in starts if onset < t < end]
        if inside:
            outcomes.append("late")
            late.add(min(inside))
        else:
            outcomes.append("fused")
    splits = sum(1 for t in starts if t not in late and any(on < t < end for on, end in spans))
    return outcomes, splits


@dataclass(frozen=True)
class SentenceScore:
    """One sentence: errors and words; first word right; first-word latency (s) when its utterance
    started cleanly and was paced; early: words arrived before its speech was sent."""

    errors: int
    words: int
    first_ok: bool
    latency_s: float | None
    early: bool


@dataclass(frozen=True)
class SessionScore:
    """A session: its sentences as scored in the session, the gaps' outcomes, endpoints and splits."""

    sentences: tuple[SentenceScore, ...]
    gaps: tuple[str, ...]
    endpoints: int
    splits: int


def _latency(first_words_s: float | None, onset_s: float) -> tuple[float | None, bool]:
    if first_words_s is None:
        return None, False
    if first_words_s < onset_s:
        return None, True
    return first_words_s - onset_s, False


def score_session(refs: list[str], spans: list[tuple[float, float]], heard: Heard) -> SessionScore:
    """Score a session's sentences (``refs``, speech ``spans`` in stream seconds) against what it heard."""
    alignment = align(refs, spans, heard.words)
    starts = [f.start_s for f in heard.finals[1:]]
    gaps, splits = gap_outcomes(spans, starts)
    sentences = []
    for j, text in enumerate(refs):
        onset = spans[j][0]
        utterance = sum(t <= onset for t in starts)  # the utterance decoding sentence j's onset
        clean = j == 0 or gaps[j - 1] == "clean"
        latency, early = _latency(heard.first_words_s[utterance], onset) if clean else (None, False)
        sentences.append(SentenceScore(alignment.sentence_errors[j], len(text.split()), alignment.first_word_ok(j),
                                       latency, early))
    return SessionScore(tuple(sentences), tuple(gaps), len(heard.finals) - 1, splits)


def score_alone(ref: str, span: tuple[float, float], heard: Heard) -> SentenceScore:
    """Score one sentence sent alone (``span``: its speech in the clip's seconds)."""
    alignment = align([ref], [span], heard.words)
    latency, early = _latency(heard.first_words_s[0] if heard.finals else None, span[0])
    return SentenceScore(alignment.errors, len(ref.split()), alignment.first_word_ok(0), latency, early)


def _rate(errors: int, words: int) -> float | None:
    return errors / words if words else None


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(sessions: list[SessionScore], alone: list[list[SentenceScore]]) -> dict:
    """One background's figures over ``sessions`` and the same sentences ``alone`` (per session, in order)."""
    if len(sessions) != len(alone) or any(len(s.sentences) != len(a) for s, a in zip(sessions, alone)):
        raise ValueError("alone scores must match the sessions sentence for sentence")
    pairs = [(s, a) for sess, al in zip(sessions, alone) for s, a in zip(sess.sentences, al)]
    errors, words = sum(s.errors for s, _ in pairs), sum(s.words for s, _ in pairs)
    alone_errors = sum(a.errors for _, a in pairs)
    after = [(sess.sentences[j + 1], al[j + 1]) for sess, al in zip(sessions, alone)
             for j, gap in enumerate(sess.gaps) if gap != "fused"]
    timed = [(s.latency_s, a.latency_s) for s, a in pairs if s.latency_s is not None and a.latency_s is not None]
    positions = max((len(s.sentences) for s in sessions), default=0)
    by_position = []
    for k in range(positions):
        at = [(sess.sentences[k], al[k]) for sess, al in zip(sessions, alone) if k < len(sess.sentences)]
        n = sum(s.words for s, _ in at)
        by_position.append({"position": k + 1, "session_wer": _rate(sum(s.errors for s, _ in at), n),
                            "alone_wer": _rate(sum(a.errors for _, a in at), n), "words": n})
    session_wer, alone_wer = _rate(errors, words), _rate(alone_errors, words)
    gaps = [g for sess in sessions for g in sess.gaps]
    return {
        "sessions": len(sessions), "sentences": len(pairs), "ref_words": words,
        "session_errors": errors, "alone_errors": alone_errors,
        "session_wer": session_wer, "alone_wer": alone_wer,
        "wer_difference": None if session_wer is None else session_wer - alone_wer,
        "endpoints": sum(s.endpoints for s in sessions), "gaps": len(gaps),
        **{f"gaps_{o}": gaps.count(o) for o in GAP_OUTCOMES},
        "splits": sum(s.splits for s in sessions),
        "first_word_after_endpoint": {"sentences": len(after), "session_right": sum(s.first_ok for s, _ in after),
                                      "alone_right": sum(a.first_ok for _, a in after)},
        "first_word_all": {"sentences": len(pairs), "session_right": sum(s.first_ok for s, _ in pairs),
                           "alone_right": sum(a.first_ok for _, a in pairs)},
        "first_word_latency_s": {"sentences": len(timed), "session_median": _median([s for s, _ in timed]),
                                 "alone_median": _median([a for _, a in timed]),
                                 "session_early": sum(s.early for s, _ in pairs),
                                 "alone_early": sum(a.early for _, a in pairs)},
        "by_position": by_position,
    }
