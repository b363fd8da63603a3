"""DecodeOptions: one default per setting for both recognizers, bad values refused by name, flags parsed into it."""

import argparse
import inspect

import pytest

from asr.decode.hotwords import add_hotword_arguments
from asr.decode.options import (DEFAULT_BEAM, DecodeOptions, add_chunk_arguments, add_search_arguments,
                                add_threads_argument, options_from_args)
from asr.serve.multi_stream import MultiStreamRecognizer
from asr.streaming.recognizer import StreamingRecognizer


def parser(full_context: bool = False) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="decode-test")
    add_chunk_arguments(p, full_context=full_context)
    add_search_arguments(p)
    add_hotword_arguments(p)
    add_threads_argument(p)
    return p


def test_both_recognizers_default_to_the_same_options():
    defaults = {cls.__name__: inspect.signature(cls).parameters["options"].default
                for cls in (StreamingRecognizer, MultiStreamRecognizer)}
    assert set(defaults.values()) == {DecodeOptions()}
    assert DecodeOptions().beam == DEFAULT_BEAM == 10


@pytest.mark.parametrize("bad, message", [
    (dict(chunk_size=-1), r"chunk_size \(-1\)"),
    (dict(left_chunks=-2), r"left_chunks \(-2\)"),
    (dict(beam=0), r"beam \(0\) must be >= 1"),
    (dict(ctc_weight=-0.5), r"ctc_weight \(-0.5\)"),
    (dict(reverse_weight=1.5), r"reverse_weight \(1.5\) must be in \[0, 1\]"),
    (dict(hotword_rescore_weight=-1.0), r"hotword_rescore_weight \(-1.0\)"),
    (dict(hotword_unbiased_keep=-1), r"hotword_unbiased_keep \(-1\)"),
])
def test_bad_values_are_refused_with_their_name_and_value(bad, message):
    with pytest.raises(ValueError, match=message):
        DecodeOptions(**bad)


def test_full_context_is_an_option_but_cannot_stream():
    options = DecodeOptions(chunk_size=0, left_chunks=-1)
    with pytest.raises(ValueError, match=r"chunk_size \(0\) must be > 0 for streaming"):
        options.check_streaming(object())


def test_the_flags_fill_the_options():
    args = parser().parse_args(["--chunk-size", "8", "--left-chunks", "2", "--beam", "3", "--ctc-weight", "0.3",
                                "--reverse-weight", "0.2", "--hotword-score", "2", "--hotword-rescore-weight", "1",
                                "--hotword-unbiased-keep", "5"])
    assert options_from_args(args) == DecodeOptions(8, 2, 3, 0.3, 0.2, 2.0, 1.0, 5)
    assert options_from_args(parser().parse_args([])) == DecodeOptions()
    offline = options_from_args(parser(full_context=True).parse_args([]))
    assert (offline.chunk_size, offline.left_chunks) == (0, -1)


def test_options_a_script_does_not_take_keep_their_defaults():
    p = argparse.ArgumentParser()
    add_search_arguments(p, rescoring=False)
    args = p.parse_args(["--beam", "4"])
    assert not hasattr(args, "ctc_weight")
    assert options_from_args(args) == DecodeOptions(beam=4)


def test_a_bad_flag_value_is_a_usage_error_naming_it(capsys):
    p = parser()
    with pytest.raises(SystemExit) as exit_info:
        options_from_args(p.parse_args(["--beam", "0"]), p)
    assert exit_info.value.code == 2
    assert "beam (0) must be >= 1" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"beam \(0\)"):
        options_from_args(p.parse_args(["--beam", "0"]))
    with pytest.raises(SystemExit):
        p.parse_args(["--threads", "-1"])
    assert "-1 must be >= 0" in capsys.readouterr().err  # 0 is torch's default
