"""The README's commands run: every `python scripts/X.py` in its fenced bash blocks names a script
that exists, every `--flag` it passes is one that script's `--help` lists, and every Hydra override
given to scripts/train.py composes with conf/. Also: the README stays a guide (about 300 lines)
and its relative links lead somewhere.
"""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 330  # about 300: a guide with a GPU and a troubleshooting section; records go to data/results/
HYDRA_SCRIPTS = {"scripts/train.py"}  # flags are Hydra's own; options are overrides (key=value)
SEPARATORS = {"&&", "||", ";", "|"}


def bash_blocks(markdown: str) -> list[str]:
    """The bodies of the ```bash fenced blocks."""
    return re.findall(r"^```bash\n(.*?)^```", markdown, flags=re.MULTILINE | re.DOTALL)


def commands(block: str) -> list[list[str]]:
    """Each command of a block as tokens: continuation lines joined, comments dropped, split at
    `&&`, `;` and pipes."""
    joined = re.sub(r"\\\n", " ", block)
    found = []
    for line in joined.splitlines():
        current: list[str] = []
        for token in shlex.split(line, comments=True):
            if token in SEPARATORS:
                found.append(current)
                current = []
            else:
                current.append(token)
        found.append(current)
    return [c for c in found if c]


def script_call(tokens: list[str]) -> tuple[str, list[str]] | None:
    """(scripts/X.py, the arguments after it) when ``tokens`` run a script of this repository."""
    for i, token in enumerate(tokens[:-1]):
        if re.fullmatch(r"python3?", Path(token).name) and tokens[i + 1].startswith("scripts/"):
            return tokens[i + 1], tokens[i + 2:]
    return None


def flags(arguments: list[str]) -> list[str]:
    """The long options among ``arguments`` (``--name=value`` gives ``--name``)."""
    return [a.split("=", 1)[0] for a in arguments if a.startswith("--") and len(a) > 2]


def readme_calls() -> list[tuple[str, list[str]]]:
    calls = [script_call(c) for block in bash_blocks(README.read_text()) for c in commands(block)]
    return [c for c in calls if c is not None]


CALLS = readme_calls()


@pytest.fixture(scope="module")
def helps() -> dict[str, str]:
    """Every README script's --help, each run once, in one child interpreter (tests/script_help.py)."""
    scripts = sorted({s for s, _ in CALLS if (ROOT / s).is_file() and s not in HYDRA_SCRIPTS})
    result = subprocess.run([sys.executable, str(Path(__file__).with_name("script_help.py")), *scripts],
                            cwd=ROOT, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert result.returncode == 0, f"tests/script_help.py failed:\n{result.stderr[-3000:]}"
    found = json.loads(result.stdout)
    failed = {s: r["error"] or f"exit status {r['code']}" for s, r in found.items() if r["code"] != 0}
    assert not failed, f"--help failed: {failed}"
    return {s: r["help"] for s, r in found.items()}


def test_the_readme_is_a_guide_with_commands():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; records go to data/results/"
    assert "pip install -e '.[synth]' && python scripts/quickstart.py" in lines[lines.index("```bash") + 1]
    # .ci/run runs this exact command
    assert "pip install -e '.[dev]' && python -m pytest" in README.read_text()
    assert len(CALLS) >= 30 and len({s for s, _ in CALLS}) >= 15


def test_every_script_exists():
    missing = sorted({s for s, _ in CALLS if not (ROOT / s).is_file()})
    assert not missing, f"README.md runs scripts that do not exist: {missing}"


def test_every_flag_is_in_its_scripts_help(helps):
    unknown = [f"{script} {flag}" for script, arguments in CALLS if script in helps
               for flag in flags(arguments)
               if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", helps[script])]
    assert not unknown, "README.md passes flags that --help does not list:\n" + "\n".join(unknown)


def hydra_overrides(arguments: list[str]) -> list[str]:
    """The overrides of a train.py call, a sweep (``a,b,c``) reduced to its first value."""
    return [a if "," not in a else a.split(",", 1)[0] for a in arguments if not a.startswith("-")]


def test_every_training_override_composes():
    calls = [arguments for script, arguments in CALLS if script in HYDRA_SCRIPTS]
    assert calls
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        for arguments in calls:
            compose("train", overrides=hydra_overrides(arguments))  # an unknown key or option raises


def test_relative_links_exist():
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README.read_text())
    missing = [link for link in links if not (ROOT / link).exists()]
    assert links and not missing, f"README.md links to missing files: {missing}"


def test_the_parser_reads_commands_as_a_shell_would():
    block = ("python scripts/decode.py --checkpoint CKPT --lm x.arpa \\\n    --word-lm=y.arpa   # --not-a-flag\n"
             "pip install -e '.[dev]' && python scripts/serve.py --web\n# python scripts/none.py --x\n")
    calls = [script_call(c) for c in commands(block)]
    assert [(s, flags(a)) for s, a in filter(None, calls)] == [
        ("scripts/decode.py", ["--checkpoint", "--lm", "--word-lm"]), ("scripts/serve.py", ["--web"])]
    assert hydra_overrides(["-m", "pos_enc=rel_xl,shaw", "trainer.devices=8"]) == ["pos_enc=rel_xl",
                                                                                  "trainer.devices=8"]
