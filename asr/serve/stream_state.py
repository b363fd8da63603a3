"""The lifecycle of one recognizer stream: one state, and the moves between states that are allowed.

::

    DECODING --endpoint / segment end--> ENDPOINT --reset()--> DECODING
    DECODING --end of the audio, flushed--> DONE
    ENDPOINT --end of the audio, flushed--> DONE       (reset() took no frames: nothing is left to decode)
    DECODING, ENDPOINT --a step raises--> FAILED

- ``DECODING``: the current utterance takes frames; ``result()`` is its partial n-best.
- ``ENDPOINT``: the utterance ended (an endpoint, or the end of a VAD segment) and its final result is
  ready; the stream takes no frames until ``reset()`` starts the next one.
- ``DONE``: the audio ended and everything was decoded; ``result()`` is the last final result.
- ``FAILED``: decoding this stream raised; it decodes nothing more (``Stream.error`` says why).

``DONE`` and ``FAILED`` are final: a stream in them never moves again.

Two smaller states describe the input side, apart from the lifecycle: :class:`AudioEnd` (how far the
end of the audio has reached through VAD and fbank) and :class:`Segment` (the audio segment the
encoder is on: with a VAD, each speech segment).
"""

from __future__ import annotations

from enum import Enum


class StreamState(Enum):
    DECODING = "decoding"
    ENDPOINT = "endpoint"
    DONE = "done"
    FAILED = "failed"

    @property
    def has_final(self) -> bool:
        """The current utterance's final result is made (and holds until ``reset()``, or for good)."""
        return self in (StreamState.ENDPOINT, StreamState.DONE)

    @property
    def takes_frames(self) -> bool:
        return self is StreamState.DECODING

    @property
    def is_terminal(self) -> bool:
        return self in (StreamState.DONE, StreamState.FAILED)


ALLOWED_MOVES: dict[StreamState, frozenset[StreamState]] = {
    StreamState.DECODING: frozenset({StreamState.ENDPOINT, StreamState.DONE, StreamState.FAILED}),
    StreamState.ENDPOINT: frozenset({StreamState.DECODING, StreamState.DONE, StreamState.FAILED}),
    StreamState.DONE: frozenset(),
    StreamState.FAILED: frozenset(),
}


class StreamStateError(RuntimeError):
    """A move the lifecycle does not allow (a bug in the caller, never bad input)."""


def move(current: StreamState, target: StreamState) -> StreamState:
    """``target``, when the lifecycle allows moving there from ``current``; StreamStateError otherwise."""
    if target not in ALLOWED_MOVES[current]:
        allowed = ", ".join(sorted(s.name for s in ALLOWED_MOVES[current])) or "none: it is final"
        raise StreamStateError(f"a stream cannot move from {current.name} to {target.name} (from {current.name}: "
                               f"{allowed}).")
    return target


class AudioEnd(Enum):
    """How far the end of a stream's audio has travelled through its pipeline (each step once, in order).

    ``OPEN``: audio may still come; ``FINISH_CALLED``: ``finish()`` was called (audio queued before it may
    still wait); ``VAD_FLUSHED``: the VAD gave its last output (streams with a VAD); ``FRONTEND_FLUSHED``:
    the fbank gave the frames that wait for the end of the audio: what is left is decoding.
    """

    OPEN = "open"
    FINISH_CALLED = "finish_called"
    VAD_FLUSHED = "vad_flushed"
    FRONTEND_FLUSHED = "frontend_flushed"


class Segment(Enum):
    """The audio segment the encoder is on (with a VAD each speech segment is one; without, the stream is).

    ``WAITING``: none of its audio arrived yet (its start time is unknown); ``OPEN``: its audio arrives;
    ``CLOSED``: the VAD ended it and its frontend was flushed; ``reset()`` after its final opens the next.
    """

    WAITING = "waiting"
    OPEN = "open"
    CLOSED = "closed"
