"""What a stream reports: its current hypotheses (partial or final), with word times."""

from __future__ import annotations

from dataclasses import dataclass

from asr.serve.timestamps import Word


@dataclass(frozen=True)
class Hypothesis:
    """One transcript: text, token ids and (final results only) words with stream times in seconds."""

    text: str
    tokens: tuple[int, ...]
    words: tuple[Word, ...] = ()


@dataclass(frozen=True)
class Result:
    """The current hypotheses of a stream's current utterance, best first.

    is_final: the utterance ended (endpoint or end of audio) and was rescored.
    segment: utterance index in the stream (continuous decoding counts up).
    span: final results only: (start, end) stream seconds of the encoder frames the utterance
        decoded; its end is where its endpoint fired (or the end of the audio).
    """

    hyps: list[Hypothesis]
    is_final: bool
    segment: int
    span: tuple[float, float] | None = None

    @property
    def text(self) -> str:
        return self.hyps[0].text if self.hyps else ""

    @property
    def words(self) -> tuple[Word, ...]:
        return self.hyps[0].words if self.hyps else ()
