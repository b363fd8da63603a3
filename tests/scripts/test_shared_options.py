"""The shared decoding flags are defined in one place: no script under scripts/ defines (``add_argument``) an
option that a shared helper defines. The scripts are read as source (``ast``), never imported."""

import argparse
import ast
from pathlib import Path

from asr.decode.hotwords import add_hotword_arguments
from asr.decode.options import add_checkpoint_argument, add_chunk_arguments, add_search_arguments, add_threads_argument
from asr.lm import add_lm_arguments
from asr.streaming.vad import add_vad_arguments

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
PROGRAMS = Path(__file__).resolve().parents[2] / "asr" / "cli"


def shared_options() -> set[str]:
    """Every option string the shared helpers define (aliases included)."""
    parser = argparse.ArgumentParser(add_help=False)
    for add in (add_checkpoint_argument, add_threads_argument, add_chunk_arguments, add_search_arguments,
                add_hotword_arguments, add_lm_arguments, add_vad_arguments):
        add(parser)
    several = argparse.ArgumentParser(add_help=False)
    add_checkpoint_argument(several, many=True)
    return {flag for p in (parser, several) for action in p._actions for flag in action.option_strings}


def defined_options(source: str, filename: str = "<script>") -> list[tuple[int, str]]:
    """(line, option string) of every ``*.add_argument("--x", ...)`` call in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            found += [(node.lineno, arg.value) for arg in node.args
                      if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("-")]
    return found


def test_defined_options_finds_every_option_string_of_an_add_argument_call():
    source = ('p.add_argument("--beam", type=int)\nparser.add_argument("audio")\n'
              'group.add_argument("--checkpoint", "--ckpt", required=True)\nprint("--threads")\n')
    assert defined_options(source) == [(1, "--beam"), (3, "--checkpoint"), (3, "--ckpt")]


def test_the_helpers_define_the_shared_options():
    assert {"--checkpoint", "--ckpt", "--ckpts", "--threads", "--chunk-size", "--left-chunks", "--beam", "--ctc-weight",
            "--reverse-weight", "--hotwords", "--hotword-score", "--lm", "--word-lm", "--vad"} <= shared_options()


def test_no_script_defines_a_shared_option():
    shared = shared_options()
    scripts = sorted(SCRIPTS.glob("*.py")) + sorted(PROGRAMS.glob("*.py"))  # a script's program may live in asr/cli
    assert len(scripts) > 10  # the folder was found
    per_script = {path: defined_options(path.read_text(encoding="utf-8"), str(path)) for path in scripts}
    assert sum(map(len, per_script.values())) > 100  # the scripts' own options were read
    offending = [f"{path.parent.name}/{path.name}:{line} defines {flag}" for path, found in per_script.items()
                 for line, flag in found if flag in shared]
    assert not offending, ("use the shared helpers (asr.decode.options, add_hotword_arguments, add_lm_arguments, "
                           "add_vad_arguments) instead: " + "; ".join(offending))
