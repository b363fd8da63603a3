"""Words of the background: a word far under its utterance's loudest word and on the floor is dropped from the
stream's results; a quieter sentence keeps every word; the decision uses only the audio heard so far."""

import math

import numpy as np
import pytest
import torch

from asr.data.features import SAMPLE_RATE
from asr.decode.background_words import background_words, without_words, word_groups
from asr.decode.endpoint import EndpointConfig
from tests.serve.test_endpoint_level import _stream
from tests.serve.test_endpoint_reset import run

FRAME = 640  # samples an encoder frame (40 ms)
FLOOR = -40.0  # talk behind the speaker sets the floor


def _word_frames(words: list[tuple[str, int, int]]) -> tuple[list[str], list[tuple[int, int]]]:
    """Pieces and token spans of words given as (text, first frame, frames): one token a letter, each a frame."""
    pieces, spans = [], []
    for text, first, _ in words:
        for k, letter in enumerate(text):
            pieces.append(("\u2581" if k == 0 else "") + letter)
            spans.append((first + k, first + k + 1))
    return pieces, spans


def _judge(words, levels, floor=FLOOR):
    pieces, spans = _word_frames(words)
    heard = np.asarray(levels, dtype=np.float64)
    return background_words(pieces, spans, heard, np.full(heard.shape, floor), speaker_margin_db=15.0,
                            floor_margin_db=10.0)


def test_a_background_word_20_db_under_the_speaker_in_a_pause_is_dropped():
    """Talk 20 dB under the speaker, 5 dB over its own floor, before and between the speaker's words."""
    levels = [FLOOR + 5.0] * 10 + [-15.0] * 10 + [FLOOR + 5.0] * 10 + [-17.0] * 10
    words = [("ab", 2, 2), ("spk", 10, 3), ("cd", 22, 2), ("talk", 30, 4)]
    assert _judge(words, levels) == [True, False, True, False]
    # Far under the loudest word but far over a quiet room's floor (a quieter speaker): the speaker's.
    assert _judge(words, levels, floor=-60.0) == [False] * 4
    assert _judge(words[:1], levels) == [False]  # alone in its utterance, the word is the loudest there


def test_a_sentence_12_db_quieter_than_the_last_keeps_every_word():
    """In its own utterance the quieter sentence (its weak word 6 dB under its others, 7 dB over the floor) sets the
    loudest word; after a loud one in the same utterance (a fused pause), 12 dB under it is inside the speaker's
    margin. A word both more than the margin under the loud one and on the floor is dropped there."""
    quiet = [-27.0, -27.0, -33.0, -33.0, -27.0, -27.0]
    words = [("on", 0, 2), ("an", 2, 2), ("up", 4, 2)]
    assert _judge(words, quiet) == [False] * 3
    fused = [("loud", 0, 4)] + [(t, a + 10, n) for t, a, n in words]
    assert _judge(fused, [-15.0] * 6 + [FLOOR + 3.0] * 4 + [-27.0] * 6) == [False] * 4
    assert _judge(fused, [-15.0] * 6 + [FLOOR + 3.0] * 4 + quiet) == [False, False, True, False]


def test_unknown_levels_and_pieces_without_text_keep_the_word():
    levels = [math.nan] * 4 + [-15.0] * 4
    assert _judge([("ab", 0, 2), ("cd", 4, 2)], levels) == [False, False]
    assert word_groups(["\u2581", "\u2581a", "b", "", "\u2581c"]) == [[0, 1, 2, 3], [4]]
    assert word_groups(["\u2581a", "\u2581"]) == [[0, 1]]
    tokens, pieces, spans = without_words([1, 2, 3], ["\u2581a", "b", "\u2581c"], [(0, 1), (1, 2), (2, 3)],
                                          [True, False])
    assert tokens == [3] and pieces == ["\u2581c"] and spans == [(2, 3)]
    with pytest.raises(ValueError, match="flags"):
        without_words([1], ["\u2581a"], [(0, 1)], [True, False])


def _audio(levels_db: list[float], seed: int = 0) -> torch.Tensor:
    """White noise with each 40 ms frame at its RMS level (dBFS)."""
    g = torch.Generator().manual_seed(seed)
    scale = torch.tensor([10.0 ** (db / 20.0) for db in levels_db]).repeat_interleave(FRAME)
    return scale * torch.randn(len(levels_db) * FRAME, generator=g)


def _word(first: int, end: int) -> str:
    """The word ``ScriptedCtc`` reads on frames [first, end): "▁" then "abab..."."""
    return ("ab" * end)[: end - first - 1]


def _talk_then_speaker():
    """Talk on its floor for 1.2 s with a word the recognizer emits (frames 12-18), then the speaker 24 dB over
    it for 1.2 s (frames 30-60); the stream starts on the talk, so no speaker's level judges its word."""
    levels = [FLOOR] * 12 + [FLOOR + 4.0] * 6 + [FLOOR] * 12 + [-16.0] * 30 + [FLOOR] * 10
    return levels, [(12, 18), (32, 58)]


@pytest.mark.parametrize("drop", [True, False])
def test_a_stream_drops_the_background_word_from_its_final(model, tokenizer, drop):
    levels, speech = _talk_then_speaker()
    # The encoder's forgetting would also take the word (tests/serve/test_forget_background.py): off, the word
    # rule alone decides.
    rec, stream = _stream(model, tokenizer, speech,
                          EndpointConfig(reset="both", drop_background_words=drop, forget_background=False))
    finals = [r for r in run(rec, stream, _audio(levels)) if r.text]
    assert len(finals) == 1
    expected = [_word(32, 58)] if drop else [_word(12, 18), _word(32, 58)]
    assert [w.word for w in finals[0].words] == expected and finals[0].text == " ".join(expected)
    assert finals[0].words[-1].start == pytest.approx(33 * 0.04, abs=0.05)


def test_partials_drop_it_once_the_speaker_is_heard_and_never_from_later_audio(model, tokenizer):
    """A partial's words are judged on the frames decoded so far: what follows them cannot change them."""
    levels, speech = _talk_then_speaker()
    heard = []
    for tail_db in (FLOOR, -6.0):  # the audio after frame 56: the speaker's end and the floor, or a loud noise
        rec, stream = _stream(model, tokenizer, speech, EndpointConfig(reset="both", forget_background=False))
        wave = _audio(levels[:56] + [tail_db] * 24)
        partials = []
        for start in range(0, wave.numel(), 4 * FRAME):  # a chunk's worth at a time
            stream.accept_waveform(SAMPLE_RATE, wave[start : start + 4 * FRAME])
            rec.decode()
            partials.append(stream.result().text)
        heard.append(partials)
    assert heard[0][:14] == heard[1][:14]  # the audio of frames 0-55
    assert _word(12, 18) in heard[0][:8]  # kept while it is the loudest word heard
    assert heard[0][13].startswith(_word(32, 40)) and _word(12, 18) not in heard[0][13].split()
