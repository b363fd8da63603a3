"""A streaming voice activity detector in front of the recognizer: speech segments in, non-speech out.

Axis legend: n audio samples, W samples of one VAD window (512 at 16 kHz: 32 ms).

Why: the model learned from utterances that start and end within a fraction of a second of
speech; long non-speech fed to a stream moves its running statistics and fills its attention
cache with frames it never heard in training, and costs encoder time for nothing. A VAD keeps
that audio out: only speech, with a little audio around it, reaches the frontend.

:class:`SileroVad` runs Silero VAD's ONNX model (shipped inside the ``silero-vad`` wheel; run by
ONNX Runtime, nothing downloaded) on 32 ms windows: a speech probability per window, with a
typed recurrent state. :class:`SpeechSegmenter` turns those probabilities into speech segments
with hysteresis:

* a segment starts once the windows have held speech for ``min_speech_s`` (each at least
  ``threshold - 0.15``, the first at least ``threshold``), and its audio starts ``pad_s`` before
  that onset, so the first phoneme is not cut;
* it ends after ``min_silence_s`` of windows under ``threshold - 0.15`` (that silence is part of
  the segment: the recognizer needs the audio after the last word to emit it).

Windows are aligned at the stream's first sample, so the segments do not depend on how the
audio was cut into pieces, and the same audio always gives the same segments.
"""

from __future__ import annotations

import argparse
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from asr.data.features import SAMPLE_RATE

VAD_CHOICES = ("none", "silero")
SILERO_WINDOW = 512  # samples at 16 kHz the model takes at once
SILERO_CONTEXT = 64  # samples of the previous window it sees in front of each window
RELEASE_MARGIN = 0.15  # Silero's hysteresis: speech ends under threshold - 0.15


@dataclass(frozen=True)
class VadConfig:
    """Speech segmentation settings (see the module docstring).

    threshold: speech probability at which a window starts speech (0 < threshold < 1).
    min_speech_s: speech this long starts a segment (shorter bursts are dropped).
    min_silence_s: non-speech this long ends a segment (> 0).
    pad_s: audio kept before the onset.

    Why these defaults: a short min_speech_s lets a soft onset open its segment before a dip in it
    restarts the count, so on the live bench's dev sessions no speech is dropped on any background;
    0.3 s of silence ends a segment at nearly every pause between sentences without cutting the
    sentences themselves. Synthetic speech has no hesitations: for speakers who pause mid-sentence a
    longer min_silence_s keeps sentences whole.
    """

    threshold: float = 0.5
    min_speech_s: float = 0.1
    min_silence_s: float = 0.3
    pad_s: float = 0.3

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"VAD threshold ({self.threshold}) must be a probability in (0, 1).")
        if self.min_speech_s < 0 or self.pad_s < 0 or not self.min_silence_s > 0:
            raise ValueError(f"VAD durations must be >= 0 and min_silence_s > 0, got min_speech_s="
                             f"{self.min_speech_s}, min_silence_s={self.min_silence_s}, pad_s={self.pad_s}.")

    @property
    def release(self) -> float:
        """Probability under which a window is non-speech."""
        return max(self.threshold - RELEASE_MARGIN, 0.0)


def silero_model_path() -> Path:
    """The ONNX model inside the installed ``silero-vad`` wheel (found without importing the package)."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("the silero VAD needs the silero-vad package: pip install silero-vad")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "silero_vad.onnx"
    if not path.is_file():
        raise ValueError(f"the silero-vad package has no model at {path}; reinstall it (pip install silero-vad)")
    return path


@dataclass
class SileroState:
    """Silero's state between windows: rnn (2, 1, 128) and the previous window's last 64 samples (64,)."""

    rnn: np.ndarray
    context: np.ndarray


class SileroVad:
    """Speech probability of each 32 ms window of 16 kHz audio (one ONNX session, any number of streams)."""

    window = SILERO_WINDOW

    def __init__(self, path: str | Path | None = None, threads: int = 1) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # the packaged model has unused initializers ORT warns about
        self.session = ort.InferenceSession(str(path or silero_model_path()), options,
                                            providers=["CPUExecutionProvider"])
        self._rate = np.array(SAMPLE_RATE, dtype=np.int64)

    def init_state(self) -> SileroState:
        return SileroState(np.zeros((2, 1, 128), np.float32), np.zeros(SILERO_CONTEXT, np.float32))

    def probs(self, samples: np.ndarray, state: SileroState) -> tuple[list[float], SileroState]:
        """(k * W,) float32 samples -> the k windows' speech probabilities and the state after them."""
        if samples.ndim != 1 or samples.size % self.window:
            raise ValueError(f"samples must be (k * {self.window},), got shape {samples.shape}.")
        rnn, context, probs = state.rnn, state.context, []
        for start in range(0, samples.size, self.window):
            window = samples[start : start + self.window]
            x = np.concatenate([context, window])[None]  # (1, 64 + W)
            out, rnn = self.session.run(None, {"input": x, "state": rnn, "sr": self._rate})
            probs.append(float(out[0, 0]))
            context = window[-SILERO_CONTEXT:]
        return probs, SileroState(rnn, context.copy())


@dataclass(frozen=True)
class Speech:
    """Audio of a speech segment: samples (n,) starting at stream sample ``start``."""

    start: int
    samples: torch.Tensor


@dataclass(frozen=True)
class SpeechEnd:
    """The current speech segment ended at stream sample ``end`` (exclusive)."""

    end: int


class SpeechSegmenter:
    """One stream's audio -> :class:`Speech` pieces and :class:`SpeechEnd` marks, in stream order.

    The pieces of one segment are contiguous; segments never overlap, so no sample is decoded twice.

    Args:
        vad: the speech probability model (shared by streams; the state is this segmenter's).
        config: the hysteresis settings.
    """

    def __init__(self, vad: SileroVad, config: VadConfig) -> None:
        self.vad = vad
        self.config = config
        self._start_windows = max(1, round(config.min_speech_s * SAMPLE_RATE / vad.window))
        self._end_windows = max(1, round(config.min_silence_s * SAMPLE_RATE / vad.window))
        self._pad = round(config.pad_s * SAMPLE_RATE)
        self.reset()

    def reset(self) -> None:
        """A new stream: sample 0, no speech."""
        self._state = self.vad.init_state()
        self._leftover = np.zeros(0, np.float32)  # samples short of a whole window
        self.clock = 0  # stream samples classified so far
        self.in_speech = False
        self._run = 0  # speech windows of a starting segment, or silent windows of an ending one
        self._onset = 0  # first sample of the starting segment's first speech window
        self._recent = torch.zeros(0)  # audio before a segment starts, for its padding
        self._recent_start = 0  # stream sample of _recent[0]
        self.windows = 0  # windows classified (for tests and benchmarks)

    @property
    def pending_samples(self) -> int:
        """Samples waiting for a whole window."""
        return self._leftover.size

    def accept(self, samples: torch.Tensor) -> list[Speech | SpeechEnd]:
        """samples (n,) float in [-1, 1] at 16 kHz -> the events they complete."""
        audio = np.concatenate([self._leftover, samples.reshape(-1).numpy().astype(np.float32, copy=False)])
        whole = audio.size - audio.size % self.vad.window
        self._leftover = audio[whole:].copy()
        if whole == 0:
            return []
        probs, self._state = self.vad.probs(audio[:whole], self._state)
        self.windows += len(probs)
        audio = torch.from_numpy(audio[:whole].copy())
        events: list[Speech | SpeechEnd] = []
        w = self.vad.window
        for i, prob in enumerate(probs):
            events += self._window(audio[i * w : (i + 1) * w], prob)
        return _merged(events)

    def finish(self) -> list[Speech | SpeechEnd]:
        """End of the audio: a segment that is still open keeps its last samples (no end mark: the stream ends)."""
        events: list[Speech | SpeechEnd] = []
        tail = torch.from_numpy(self._leftover.copy())
        self._leftover = np.zeros(0, np.float32)
        if self.in_speech:
            events.append(Speech(self.clock, tail))
        elif self._run > 0:  # speech that the end of the audio cut short of min_speech_s is kept, not dropped
            self._remember(tail)
            events.append(self._start())
        self.clock += tail.numel()
        return _merged([e for e in events if not isinstance(e, Speech) or e.samples.numel() > 0])

    def _window(self, audio: torch.Tensor, prob: float) -> list[Speech | SpeechEnd]:
        cfg, start = self.config, self.clock
        self.clock += audio.numel()
        if self.in_speech:
            self._run = self._run + 1 if prob < cfg.release else 0
            events: list[Speech | SpeechEnd] = [Speech(start, audio)]
            if self._run >= self._end_windows:
                events.append(SpeechEnd(self.clock))
                self.in_speech, self._run = False, 0
                self._recent, self._recent_start = torch.zeros(0), self.clock
            return events
        self._remember(audio)
        if self._run == 0 and prob >= cfg.threshold:
            self._run, self._onset = 1, start
        elif self._run > 0 and prob >= cfg.release:
            self._run += 1
        else:
            self._run = 0
        return [self._start()] if self._run >= self._start_windows else []

    def _remember(self, audio: torch.Tensor) -> None:
        """Keep the audio a starting segment may still need: its pad and its speech so far."""
        self._recent = torch.cat([self._recent, audio])
        keep = self._pad + (self._run + 1) * self.vad.window
        if self._recent.numel() > keep:
            self._recent_start += self._recent.numel() - keep
            self._recent = self._recent[-keep:]

    def _start(self) -> Speech:
        """Open a segment: the remembered audio from ``pad_s`` before the onset."""
        first = max(self._recent_start, self._onset - self._pad)
        piece = Speech(first, self._recent[first - self._recent_start :])
        self.in_speech, self._run = True, 0
        self._recent = torch.zeros(0)
        return piece


def _merged(events: list[Speech | SpeechEnd]) -> list[Speech | SpeechEnd]:
    """Adjacent Speech pieces joined into one (fewer, larger frontend calls)."""
    out: list[Speech | SpeechEnd] = []
    for event in events:
        last = out[-1] if out else None
        if isinstance(event, Speech) and isinstance(last, Speech) and last.start + last.samples.numel() == event.start:
            out[-1] = Speech(last.start, torch.cat([last.samples, event.samples]))
        else:
            out.append(event)
    return out


def add_vad_arguments(parser: argparse.ArgumentParser, default: str = "none") -> None:
    """``--vad`` and its settings: the same in every script. ``default``: the script's ``--vad``
    (the server's live microphones want silero; files of trimmed sentences read best without)."""
    if default not in VAD_CHOICES:
        raise ValueError(f"--vad default {default!r} is not one of {VAD_CHOICES}.")
    defaults = VadConfig()
    parser.add_argument("--vad", choices=VAD_CHOICES, default=default,
                        help="voice activity detector in front of the recognizer: silero (Silero VAD's ONNX model "
                             "from the silero-vad wheel) keeps non-speech out of the encoder; none feeds all audio "
                             f"(default {default})")
    parser.add_argument("--vad-threshold", type=float, default=defaults.threshold,
                        help=f"speech probability that starts speech (default {defaults.threshold})")
    parser.add_argument("--vad-min-speech", type=float, default=defaults.min_speech_s, metavar="S",
                        help=f"seconds of speech that start a segment (default {defaults.min_speech_s})")
    parser.add_argument("--vad-min-silence", type=float, default=defaults.min_silence_s, metavar="S",
                        help=f"seconds of non-speech that end a segment (default {defaults.min_silence_s})")
    parser.add_argument("--vad-pad", type=float, default=defaults.pad_s, metavar="S",
                        help=f"seconds of audio kept before the speech onset (default {defaults.pad_s})")


def vad_from_args(args: argparse.Namespace) -> VadConfig | None:
    """The VAD settings ``add_vad_arguments``' options ask for (None: ``--vad none``)."""
    if args.vad == "none":
        return None
    return VadConfig(threshold=args.vad_threshold, min_speech_s=args.vad_min_speech,
                     min_silence_s=args.vad_min_silence, pad_s=args.vad_pad)
