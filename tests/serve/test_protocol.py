"""The control-message parser answers every hostile text with ProtocolError and a short message."""

from __future__ import annotations

import pytest

from asr.serve.protocol import End, ProtocolError, Start, parse_text

HOSTILE = [
    "[" * 10000 + "]" * 10000,  # deeper than json's recursive decoder can go
    '{"a": ' * 10000 + "1" + "}" * 10000,
    '{"signal": "start", "nbest": ' + "9" * 5000 + "}",  # past Python's 4300-digit int conversion limit
    '{"signal": ' + "[" * 900 + "]" * 900 + "}",  # decodes; its value must not be echoed whole
    '{"signal": "' + "x" * 100000 + '"}',
    '{"signal": "start", "nbest": NaN}',
    '{"signal": "start", "nbest": 1e999}',
    '{"signal": "start", "nbest": ' + "7" * 4000 + "}",
    '{"signal": "start", "continuous_decoding": ' + "[" * 900 + "]" * 900 + "}",
    "\ud800",  # a lone surrogate
    "",
]


@pytest.mark.parametrize("message", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_control_messages_raise_protocol_error_with_a_short_message(message):
    with pytest.raises(ProtocolError) as caught:
        parse_text(message, max_nbest=10)
    assert len(str(caught.value)) < 200


def test_good_messages_still_parse():
    assert parse_text('{"signal": "start", "nbest": 3, "continuous_decoding": true}', 10) == Start(3, True)
    assert parse_text('{"signal": "end"}', 10) == End()


def test_segment_times_is_a_flag():
    assert parse_text('{"signal": "start", "segment_times": true}', 10) == Start(segment_times=True)
    with pytest.raises(ProtocolError, match="segment_times must be true or false"):
        parse_text('{"signal": "start", "segment_times": 1}', 10)
