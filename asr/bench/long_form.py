"""Long-form decoding benchmark parts: files of joined sentences, and a guarded, measured subprocess.

* :func:`build_long_file`: the sentences of a split (manifest order, cycling when the split is
  shorter) joined by 0.3 s pauses into one file of at least N minutes, with its transcript as
  a one-cut manifest: what a user with a podcast brings.
* :func:`parse_setting`: a setting's name (``full``, ``chunk16_left4``, ``chunk16_left4_pauses``,
  ``chunk16_left4_endpoints``, ``chunk16_left4_pause_endpoints``, ...) and the decode.py options it stands for.
* :func:`run_guarded`: a command in a subprocess whose resident memory is polled and which is
  killed past a limit (and given an address-space limit as a backstop), so a benchmark of a
  path that would take 24 GB cannot take the shared machine down; returns wall time, peak
  RSS (the child's ``ru_maxrss``) and whether it was stopped.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from asr.data.audio import cut_waveform
from asr.data.dataset import cut_text
from asr.data.features import SAMPLE_RATE
from asr.data.importers import make_cut, make_recording
from asr.data.manifest import read_cuts, write_cuts
from asr.decode.endpointed import FILE_TRAILING_SILENCE_S as ENDPOINT_DEFAULT

PAUSE_S = 0.3


@dataclass(frozen=True)
class Setting:
    """How one run decodes the file: ``chunk_size`` (0: full context), ``left_chunks``, cut at pauses
    first, or streamed with endpoint resets by ``endpoint_rule`` (``asr.decode.endpointed.ENDPOINT_RULES``; None:
    as one stream): the blank rule after ``endpoint_silence_s`` of blank, the pause rule after
    ``endpoint_pause_s`` of quiet audio (None: decode.py's default)."""

    name: str
    chunk_size: int
    left_chunks: int
    pauses: bool = False
    endpoint_silence_s: float | None = None
    endpoint_rule: str | None = None
    endpoint_pause_s: float | None = None

    def decode_args(self, knows_endpoints: bool = True, knows_rules: bool = True) -> list[str]:
        """decode.py's options for this setting; ``knows_endpoints``: that decode.py has endpoint resets (a
        checkout from before them streams a long file as one stream, and knows no flag to say so);
        ``knows_rules``: that it has ``--endpoint-rule`` (before it, every endpoint was the blank rule's)."""
        args = ["--chunk-size", str(self.chunk_size), "--left-chunks", str(self.left_chunks)]
        if self.endpoint_rule is not None and self.endpoint_rule != "blank" and not knows_rules:
            raise ValueError(f"setting {self.name}: this decode.py has no --endpoint-rule {self.endpoint_rule}")
        if self.endpoint_rule is not None and knows_rules:
            args += ["--endpoint-rule", self.endpoint_rule]
        if self.endpoint_silence_s is not None:
            args += ["--endpoint-silence", f"{self.endpoint_silence_s:g}"]
        if self.endpoint_pause_s is not None:
            args += ["--endpoint-pause", f"{self.endpoint_pause_s:g}"]
        if self.endpoint_rule is None and knows_endpoints and not self.pauses:
            args += ["--no-endpoint-reset"]
        # one long file is one batch; its pieces batch like any split (decode.py's default seconds a batch)
        return args + (["--segment-at-pauses"] if self.pauses else ["--batch-seconds", "1000000"])


_SECONDS = r"\d+(?:\.\d+)?"
_SETTING = re.compile(r"(?P<base>full|chunk(?P<chunk>\d+)_left(?P<left>-?\d+))"
                      rf"(?:_(?P<pauses>pauses)|_(?P<rule>pause_|both_)?endpoints(?P<seconds>{_SECONDS})?)?")


def parse_setting(text: str) -> Setting:
    """A setting by name: ``full`` or ``chunk<C>_left<L>``, optionally + ``_pauses`` (cut at pauses first) or,
    chunked with bounded left context, + ``_endpoints`` (endpoint resets by the blank rule; ``_endpoints0.3``:
    after 0.3 s), ``_pause_endpoints`` (by the audio's pauses; ``_pause_endpoints0.2``: of 0.2 s) or
    ``_both_endpoints`` (whichever comes first, each at decode.py's default)."""
    match = _SETTING.fullmatch(text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"setting {text!r}: use full or chunk<C>_left<L>, e.g. chunk16_left4, optionally + _pauses, "
            f"+ _endpoints[S], + _pause_endpoints[S] or + _both_endpoints (e.g. chunk16_left4_endpoints0.3, "
            f"chunk16_left4_pause_endpoints0.2)")
    chunk, left = (0, -1) if match["base"] == "full" else (int(match["chunk"]), int(match["left"]))
    endpoints = text.endswith("endpoints") or match["seconds"] is not None
    if endpoints and (chunk <= 0 or left < 0):
        raise argparse.ArgumentTypeError(
            f"setting {text!r}: endpoint resets stream chunk by chunk with bounded left context: use "
            f"chunk<C>_left<L>_endpoints with C > 0 and L >= 0")
    if not endpoints:
        return Setting(text, chunk, left, match["pauses"] is not None)
    rule = {"pause_": "pause", "both_": "both", None: "blank"}[match["rule"]]
    seconds = float(match["seconds"]) if match["seconds"] else None
    if seconds is not None and seconds <= 0:
        raise argparse.ArgumentTypeError(f"setting {text!r}: the endpoint's seconds must be > 0")
    if rule == "both" and seconds is not None:
        raise argparse.ArgumentTypeError(f"setting {text!r}: _both_endpoints takes decode.py's defaults, no seconds")
    if rule == "pause":
        return Setting(text, chunk, left, endpoint_rule=rule, endpoint_pause_s=seconds)
    silence = ENDPOINT_DEFAULT if rule == "blank" and seconds is None else seconds
    return Setting(text, chunk, left, endpoint_silence_s=silence, endpoint_rule=rule)


def long_file_name(minutes: float) -> str:
    return f"longform_{minutes:g}min"


def build_long_file(cuts_path: str | Path, data_dir: str | Path, out_dir: str | Path, minutes: float,
                    pause_s: float = PAUSE_S) -> Path:
    """Write ``<out_dir>/longform_<m>min.flac`` and ``cuts_longform_<m>min.jsonl.gz`` (reused when present).

    Returns the manifest path. The audio holds whole sentences until it reaches ``minutes``.
    """
    out = Path(out_dir)
    name = long_file_name(minutes)
    manifest = out / f"cuts_{name}.jsonl.gz"
    if manifest.is_file():
        return manifest
    out.mkdir(parents=True, exist_ok=True)
    source = list(read_cuts(cuts_path, data_dir))
    if not source:
        raise ValueError(f"{cuts_path} has no cuts to join")
    pause = np.zeros(int(pause_s * SAMPLE_RATE), dtype=np.int16)
    pieces, texts, samples, i = [], [], 0, 0
    while samples < minutes * 60 * SAMPLE_RATE:
        cut = source[i % len(source)]
        audio = np.round(cut_waveform(cut).numpy() * 32768.0).clip(-32768, 32767).astype(np.int16)
        if pieces:
            pieces.append(pause)
            samples += pause.size
        pieces.append(audio)
        texts.append(cut_text(cut))
        samples += audio.size
        i += 1
    audio_path = out / f"{name}.flac"
    sf.write(audio_path, np.concatenate(pieces), SAMPLE_RATE, format="FLAC", subtype="PCM_16")
    recording = make_recording(name, audio_path)
    write_cuts([make_cut(name, recording, " ".join(texts))], manifest)
    return manifest


@dataclass
class GuardedRun:
    returncode: int
    seconds: float
    peak_rss_bytes: int
    stopped: str | None  # why it was stopped ("rss > 8.0 GiB after 36 s"), None if it ended by itself
    output: str


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_guarded(cmd: list[str], cwd: str | Path, env: dict | None, rss_limit: int,
                address_limit: int | None = None, timeout_s: float | None = None, poll_s: float = 0.05) -> GuardedRun:
    """Run ``cmd``; kill it when its resident memory passes ``rss_limit`` bytes (or it runs past ``timeout_s``).

    ``address_limit``: RLIMIT_AS for the child (allocations past it fail inside the child
    instead of growing further); None leaves it unset. The RSS is polled every ``poll_s``.
    """
    def limit():
        if address_limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (address_limit, address_limit))

    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=limit)
    chunks: list[str] = []
    reader = threading.Thread(target=lambda: chunks.extend(proc.stdout), daemon=True)
    reader.start()
    stopped = None
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)  # reaped here: its rusage is the child's own
        if pid != 0:
            break
        rss = _rss_bytes(proc.pid)
        elapsed = time.perf_counter() - started
        if stopped is None and (rss > rss_limit or (timeout_s is not None and elapsed > timeout_s)):
            stopped = (f"rss {rss / 2**30:.1f} GiB > {rss_limit / 2**30:.1f} GiB after {elapsed:.0f} s"
                       if rss > rss_limit else f"timeout after {elapsed:.0f} s")
            proc.kill()
        time.sleep(poll_s)
    seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    reader.join(timeout=5)
    return GuardedRun(proc.returncode, seconds, usage.ru_maxrss * 1024, stopped, "".join(chunks))
