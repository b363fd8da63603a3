"""80-dim log-mel filterbank features (Kaldi's fbank) and the options a model was trained with.

:class:`FeatureConfig` is the ``features`` config group (``conf/features/``): the frame and
mel-bank options of Kaldi's fbank. A model's function depends on them, so they are part of
the model: training stores them in the checkpoint (``hyper_parameters["features"]``) and
every frontend that feeds the model (training, decoding, streaming, serving, export) builds
its frames from the checkpoint's own options. Checkpoints written before the options were
recorded were trained with ``FeatureConfig()`` (:data:`LEGACY`): torchaudio's defaults with
``snip_edges=True`` and the mel bank up to Nyquist.

:class:`FbankExtractor` computes the frames of a whole utterance. Two implementations of
Kaldi's fbank exist here: ``kaldi-native-fbank`` (the C++ online fbank that sherpa-onnx runs,
``backend="knf"``, the default) and torchaudio's ``compliance.kaldi.fbank``
(``backend="torchaudio"``, the training frontend and the float64 reference of the tests).
The streaming frontends
(:mod:`asr.streaming.frontend`) run the same kaldi-native-fbank code piece by piece, so
online and offline frames are the same numbers. They agree with torchaudio's to ~5e-4
(float32 FFT rounding; measured by ``scripts/bench_frontend.py``).

Frame timing. A frame is ``frame_length_ms`` of audio every 10 ms (fixed project-wide:
timestamps and endpointing use :data:`FRAME_SHIFT_S`). With ``snip_edges=True`` frame t covers
samples ``[t * shift, t * shift + length)`` and only whole windows count; with
``snip_edges=False`` frame t is centred on ``t * shift + shift / 2``, windows that stick out of
the audio are mirrored back into it, and n samples give ``(n + shift / 2) // shift`` frames.

This module is the one place that states the audio rate and the frame timing:
everything that converts samples, frames and seconds imports these constants.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from typing import Any

import numpy as np
import torch

SAMPLE_RATE = 16000  # Hz: every waveform is resampled to this rate before features
FRAME_LENGTH_MS = 25.0
FRAME_SHIFT_MS = 10.0
FRAME_SHIFT_S = FRAME_SHIFT_MS / 1000.0  # seconds of audio per feature frame
FRAMES_PER_SECOND = round(1000.0 / FRAME_SHIFT_MS)  # feature frames a second of audio
FRAME_SHIFT_SAMPLES = round(SAMPLE_RATE * FRAME_SHIFT_S)  # samples between frame starts
DB_PER_NEPER = 10.0 / math.log(10.0)  # a log-mel (natural-log energy) difference -> dB
WINDOW_TYPES = ("povey", "hamming", "hanning", "hann", "rectangular", "blackman")
MEL_BANKS = ("kaldi", "librosa")
BACKENDS = ("knf", "torchaudio")
# Samples an offline extraction hands kaldi-native-fbank at a time (10 s): its copies stay this small.
EXTRACT_PIECE = 10 * SAMPLE_RATE
# Training extracts with torchaudio where it can: a quarter of kaldi-native-fbank's CPU on whole
# utterances (0.43 vs 1.64 ms a second of audio, scripts/bench_frontend.py), in the DataLoader
# workers that share the cores with the model; both are within 4e-4 of the float64 frames.
# torchaudio's Kaldi fbank has no librosa mel banks and no periodic "hann" window: options with
# those train with kaldi-native-fbank (see training_backend).
TRAINING_BACKEND = "torchaudio"


@dataclass(frozen=True)
class FeatureConfig:
    """``features``: the Kaldi fbank options a model is trained and run with.

    The defaults are :data:`LEGACY`, the options every checkpoint without a record was
    trained with; ``conf/features/sherpa.yaml`` holds :data:`SHERPA`, sherpa-onnx's.

    Args:
        num_mel_bins: F, mel bins (the encoder's ``input_dim``).
        frame_length_ms: window length; frames start every 10 ms.
        snip_edges: True: only windows that fit in the audio; False: windows centred every
            10 ms, mirrored at the edges (Kaldi's and sherpa-onnx's online fbank).
        low_freq: lowest mel-bank frequency, Hz.
        high_freq: highest mel-bank frequency, Hz; <= 0 is an offset from Nyquist
            (0: Nyquist, -400: 7600 Hz at 16 kHz).
        window_type: one of :data:`WINDOW_TYPES` ("hann": periodic, librosa's and NeMo's;
            "hanning": Kaldi's symmetric one).
        preemphasis: pre-emphasis coefficient in [0, 1] (0: none).
        remove_dc_offset: subtract each window's mean before the FFT.
        dither: Gaussian dither added to the (scaled) samples; 0 is deterministic.
        sample_scale: samples in [-1, 1] are multiplied by this before the fbank (32768:
            int16 range, Kaldi's and Wenet's convention; 1: NeMo's).
        mel_banks: "kaldi" (Kaldi's triangles on its mel scale) or "librosa" (librosa's and
            NeMo's: Slaney's mel scale, each triangle scaled to unit area).
        noise_floor_dbfs: None: off. Else every mel energy gets the (geometric) mean mel energy
            of white noise at this RMS level (dBFS, full scale 1.0) added: what Kaldi's dither
            adds on average, as a constant, so deterministic. Digital silence (exact zeros: a muted
            microphone, padding) then gives the frames of a faint floor instead of
            log(float eps) = -15.9 against ~+15 for speech, which no training audio has and
            which drags the CMVN and online-CMN means. See :func:`noise_floor_log_mel`.
    """

    num_mel_bins: int = 80
    frame_length_ms: float = FRAME_LENGTH_MS
    snip_edges: bool = True
    low_freq: float = 20.0
    high_freq: float = 0.0
    window_type: str = "povey"
    preemphasis: float = 0.97
    remove_dc_offset: bool = True
    dither: float = 0.0
    sample_scale: float = 32768.0
    mel_banks: str = "kaldi"
    noise_floor_dbfs: float | None = None

    def __post_init__(self) -> None:
        nyquist = SAMPLE_RATE / 2
        if self.num_mel_bins < 1:
            raise ValueError(f"features.num_mel_bins ({self.num_mel_bins}) must be >= 1.")
        if not FRAME_SHIFT_MS <= self.frame_length_ms <= 100.0:
            raise ValueError(
                f"features.frame_length_ms ({self.frame_length_ms}) must be in [{FRAME_SHIFT_MS}, 100] "
                f"(frames start every {FRAME_SHIFT_MS} ms)."
            )
        high = self.high_freq if self.high_freq > 0 else nyquist + self.high_freq
        if not 0.0 <= self.low_freq < high <= nyquist:
            raise ValueError(
                f"features: need 0 <= low_freq ({self.low_freq}) < high_freq ({self.high_freq} -> {high} Hz) "
                f"<= Nyquist ({nyquist} Hz); high_freq <= 0 is an offset from Nyquist."
            )
        if self.window_type not in WINDOW_TYPES:
            raise ValueError(f"features.window_type {self.window_type!r} is not one of {list(WINDOW_TYPES)}.")
        if not 0.0 <= self.preemphasis <= 1.0:
            raise ValueError(f"features.preemphasis ({self.preemphasis}) must be in [0, 1].")
        if not self.dither >= 0.0:
            raise ValueError(f"features.dither ({self.dither}) must be >= 0 (0: off).")
        if not self.sample_scale > 0.0:
            raise ValueError(f"features.sample_scale ({self.sample_scale}) must be > 0.")
        if self.mel_banks not in MEL_BANKS:
            raise ValueError(f"features.mel_banks {self.mel_banks!r} is not one of {list(MEL_BANKS)}.")
        if self.noise_floor_dbfs is not None and not -150.0 <= self.noise_floor_dbfs <= -20.0:
            raise ValueError(f"features.noise_floor_dbfs ({self.noise_floor_dbfs}) must be null (off) or in "
                             f"[-150, -20] dBFS.")

    @property
    def window_samples(self) -> int:
        return int(SAMPLE_RATE * self.frame_length_ms / 1000)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (what the checkpoint stores)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None) -> FeatureConfig:
        """From a mapping or OmegaConf node (None: :data:`LEGACY`); unknown keys are an error naming the valid ones."""
        values = dict(values or {})
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(values) - set(valid))
        if unknown:
            raise ValueError(f"features: unknown keys {unknown}; valid keys are {valid}.")
        return cls(**values)

    def differences(self, other: FeatureConfig) -> dict[str, tuple[Any, Any]]:
        """``{option: (self's value, other's value)}`` for every option that differs."""
        mine, theirs = self.to_dict(), other.to_dict()
        return {k: (mine[k], theirs[k]) for k in mine if mine[k] != theirs[k]}

    @property
    def torchaudio_can(self) -> bool:
        """torchaudio's Kaldi fbank computes these options (Kaldi mel banks, a Kaldi window)."""
        return self.mel_banks == "kaldi" and self.window_type != "hann"

    def torchaudio_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``torchaudio.compliance.kaldi.fbank`` for these options."""
        if not self.torchaudio_can:
            raise ValueError(f"torchaudio's Kaldi fbank has no mel_banks={self.mel_banks!r} / "
                             f"window_type={self.window_type!r}; use the knf backend.")
        return dict(
            num_mel_bins=self.num_mel_bins, frame_length=self.frame_length_ms, frame_shift=FRAME_SHIFT_MS,
            snip_edges=self.snip_edges, low_freq=self.low_freq, high_freq=self.high_freq,
            window_type=self.window_type, preemphasis_coefficient=self.preemphasis,
            remove_dc_offset=self.remove_dc_offset, dither=self.dither, energy_floor=0.0,
            sample_frequency=SAMPLE_RATE,
        )

    def knf_options(self):
        """``kaldi_native_fbank.FbankOptions`` for these options (the rest at Kaldi's defaults)."""
        import kaldi_native_fbank as knf

        opts = knf.FbankOptions()
        frame = opts.frame_opts
        frame.samp_freq = SAMPLE_RATE
        frame.frame_shift_ms = FRAME_SHIFT_MS
        frame.frame_length_ms = self.frame_length_ms
        frame.snip_edges = self.snip_edges
        frame.window_type = self.window_type
        frame.preemph_coeff = self.preemphasis
        frame.remove_dc_offset = self.remove_dc_offset
        frame.dither = self.dither
        opts.mel_opts.num_bins = self.num_mel_bins
        opts.mel_opts.low_freq = self.low_freq
        opts.mel_opts.high_freq = self.high_freq
        opts.mel_opts.is_librosa = self.mel_banks == "librosa"
        return opts


LEGACY = FeatureConfig()
# What sherpa-onnx 2.0.1 computes for online NeMo CTC models, the format scripts/export.py
# --format sherpa-onnx writes: NeMo's fbank through kaldi-native-fbank (librosa mel banks up to
# Nyquist, periodic Hann window, no DC removal, centred frames) on samples in [-1, 1]. Not its
# FeatureExtractorConfig defaults (Kaldi's, for Wenet models): found by probing its frontend
# with a model that spells its input frames out as tokens (to 1e-4).
# Why the quickstart trains on it: its model then decodes in sherpa-onnx exactly as here, at the
# same WER as the Kaldi-style presets, and its log clamps each mel energy at float eps (about
# -70 dBFS for these banks), so digital silence reads as a quiet room instead of log(eps)
# (data/results/sherpa_onnx.md, capture.md).
SHERPA = FeatureConfig(snip_edges=False, low_freq=0.0, high_freq=0.0, window_type="hann",
                       remove_dc_offset=False, sample_scale=1.0, mel_banks="librosa")
# legacy with digital silence read as white noise at -90 dBFS
FLOOR = FeatureConfig(noise_floor_dbfs=-90.0)
PRESETS = {"legacy": LEGACY, "sherpa": SHERPA, "floor": FLOOR}  # conf/features/<name>.yaml


def load_feature_config(spec: str) -> FeatureConfig:
    """A preset name of :data:`PRESETS` or a YAML file of ``FeatureConfig`` keys."""
    if spec in PRESETS:
        return PRESETS[spec]
    from pathlib import Path

    import yaml

    path = Path(spec)
    if not path.is_file():
        raise ValueError(f"features {spec!r} is neither a preset {sorted(PRESETS)} nor a YAML file.")
    return FeatureConfig.from_dict(yaml.safe_load(path.read_text()))


def training_backend(config: FeatureConfig) -> str:
    """The backend training extracts ``config``'s frames with (:data:`TRAINING_BACKEND` when it can)."""
    return TRAINING_BACKEND if config.torchaudio_can else "knf"


NOISE_FLOOR_SECONDS = 30.0  # of white noise averaged for the floor: 3000 frames, the narrowest bins within ~10%


@lru_cache(maxsize=16)
def _noise_floor(config: FeatureConfig) -> torch.Tensor:
    # Measured on unit-variance noise (far above the fbank's log(eps) clamp whatever the sample
    # scale) and moved to the asked level: every step before the mel bank is linear, so mel
    # energies scale with the noise power.
    noise = torch.from_numpy(np.random.default_rng(0).standard_normal(int(NOISE_FLOOR_SECONDS * SAMPLE_RATE)))
    plain = dataclasses.replace(config, noise_floor_dbfs=None, dither=0.0)
    # float64 through torchaudio where it computes these options, else kaldi-native-fbank's float32
    # (unit-variance noise sits far above its log(eps) clamp, so float32 loses nothing that matters)
    backend = "torchaudio" if plain.torchaudio_can else "knf"
    log_mel = FbankExtractor(plain, backend)(noise).double()  # (T, F)
    sigma = 10.0 ** (config.noise_floor_dbfs / 20.0)  # the extractor applied the sample scale already
    return log_mel.mean(0) + 2.0 * np.log(sigma)  # (F,)


def noise_floor_log_mel(config: FeatureConfig) -> torch.Tensor | None:
    """(F,) float64 mean log-mel of white noise at ``config.noise_floor_dbfs`` (None: off).

    Computed once per config from a fixed-seed noise (``NOISE_FLOOR_SECONDS``) through the
    config's own fbank (window, pre-emphasis, DC removal, mel bank, sample scale), so it is
    the floor a real faint noise gives in each bin, not a flat constant. The mean of the
    logs, not the log of the mean (0.3-0.6 nats higher in the narrow low bins): the CMVN
    and online-CMN statistics are means of log-mel, and zeros should move them as that
    noise does.
    """
    return None if config.noise_floor_dbfs is None else _noise_floor(config)


def apply_noise_floor(log_mel: torch.Tensor, config: FeatureConfig) -> torch.Tensor:
    """(..., T, F) log-mel -> log(mel + floor) per bin, in log-mel's dtype (unchanged when the floor is off).

    Per frame and per bin, so streamed and whole-utterance frames stay the same numbers.
    """
    floor = noise_floor_log_mel(config)
    if floor is None or log_mel.numel() == 0:
        return log_mel
    return torch.logaddexp(log_mel, floor.to(device=log_mel.device, dtype=log_mel.dtype))


def num_frames(config: FeatureConfig, n_samples: int) -> int:
    """Frames produced by ``n_samples`` samples (0 below the window length)."""
    window = config.window_samples
    if n_samples < window:
        return 0
    if config.snip_edges:
        return 1 + (n_samples - window) // FRAME_SHIFT_SAMPLES
    return (n_samples + FRAME_SHIFT_SAMPLES // 2) // FRAME_SHIFT_SAMPLES


def samples_for_frames(config: FeatureConfig | None, frames: int) -> int:
    """Samples a stream needs before its first ``frames`` frames are complete (>= 1 frame).

    With ``snip_edges=False`` a frame is complete once its window, centred on
    ``t * shift + shift / 2``, has ended; at least one window of audio is needed either way.
    """
    config = config or LEGACY
    if frames < 1:
        raise ValueError(f"frames ({frames}) must be >= 1.")
    window, shift = config.window_samples, FRAME_SHIFT_SAMPLES
    if config.snip_edges:
        return window + (frames - 1) * shift
    return max(window, (frames - 1) * shift + shift // 2 + window - window // 2)


class FbankExtractor:
    """waveform (n,) float in [-1, 1] at ``SAMPLE_RATE`` -> (T, num_mel_bins) float32 log-mel.

    Args:
        config: the fbank options (default :data:`LEGACY`).
        backend: ``"knf"`` (kaldi-native-fbank, the code the streaming frontends and sherpa-onnx
            run) or ``"torchaudio"`` (``compliance.kaldi.fbank``; float64 in, float64 out).
    """

    sample_rate = SAMPLE_RATE
    shift_samples = FRAME_SHIFT_SAMPLES

    def __init__(self, config: FeatureConfig | None = None, backend: str = "knf") -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend {backend!r} is not one of {list(BACKENDS)}.")
        self.config = config or LEGACY
        if backend == "torchaudio":
            self.config.torchaudio_kwargs()  # options torchaudio cannot compute: say so now
        self.backend = backend
        self.num_mel_bins = self.config.num_mel_bins
        self.window_samples = self.config.window_samples

    @property
    def min_samples(self) -> int:
        """Shortest audio (in samples) that yields frames: one window (shorter audio gives none)."""
        return self.window_samples

    def num_frames(self, n_samples: int) -> int:
        """Frames produced by ``n_samples`` samples (0 below ``min_samples``)."""
        return num_frames(self.config, n_samples)

    def __call__(self, waveform: torch.Tensor) -> torch.Tensor:
        """(n,) float waveform -> (T, num_mel_bins), T = num_frames(n); float32 (float64 in and out
        with the torchaudio backend)."""
        if waveform.dim() != 1:
            raise ValueError(f"expected a 1-D waveform (n,), got shape {tuple(waveform.shape)}")
        if waveform.numel() < self.window_samples:
            return waveform.new_zeros((0, self.num_mel_bins), dtype=torch.float32)
        if self.backend == "torchaudio":
            import torchaudio.compliance.kaldi as kaldi

            check_finite(waveform)
            dtype = torch.float64 if waveform.dtype == torch.float64 else torch.float32
            scaled = waveform.to(dtype).unsqueeze(0) * self.config.sample_scale  # (1, n)
            return apply_noise_floor(kaldi.fbank(scaled, **self.config.torchaudio_kwargs()), self.config)  # (T, F)
        # Fed a piece at a time into frames allocated once: the whole waveform in one call holds a scaled
        # copy of it and several copies of its frames, which for hours of audio is gigabytes.
        out = torch.empty(self.num_frames(waveform.numel()), self.num_mel_bins)  # (T, F)
        filled = 0
        for frames in _stream_frames(FbankStream(self.config), waveform):
            out[filled : filled + frames.size(0)] = frames
            filled += frames.size(0)
        if filled != out.size(0):
            raise RuntimeError(f"fbank gave {filled} frames where num_frames says {out.size(0)}")
        return out


def _stream_frames(stream: FbankStream, waveform: torch.Tensor) -> Iterator[torch.Tensor]:
    """The frames of ``waveform`` (n,) through ``stream``, :data:`EXTRACT_PIECE` samples at a time, then its end."""
    for start in range(0, waveform.numel(), EXTRACT_PIECE):
        yield stream.accept(waveform[start : start + EXTRACT_PIECE])
    yield stream.finish()


def check_finite(samples: torch.Tensor) -> None:
    """ValueError when samples (n,) hold NaN or inf: they have no fbank frames (a file is refused
    earlier, ``asr.data.audio.load_audio``; this guards samples handed over directly)."""
    finite = torch.isfinite(samples)
    if not bool(finite.all()):
        bad = int(finite.numel() - finite.sum())
        raise ValueError(f"audio holds {bad} non-finite samples (NaN or inf) of {samples.numel()}; "
                         "they have no fbank frames")


class FbankStream:
    """Frames of one audio stream fed piece by piece: kaldi-native-fbank's ``OnlineFbank``.

    :meth:`accept` returns the frames the new samples complete, :meth:`finish` the rest
    (with ``snip_edges=False`` the last frames reach past the end and are mirrored, so
    they wait for it). Concatenated, they are the frames of the whole audio, the same
    numbers :class:`FbankExtractor` gives (it runs this class). Nothing comes out before
    one window of audio (``min_samples``), as a shorter utterance has no frames.
    """

    def __init__(self, config: FeatureConfig | None = None) -> None:
        self.config = config or LEGACY
        self._options = self.config.knf_options()
        self.reset()

    def reset(self) -> None:
        import kaldi_native_fbank as knf

        self._fbank = knf.OnlineFbank(self._options)
        self._taken = 0  # frames returned so far
        self._samples = 0

    @property
    def samples_seen(self) -> int:
        return self._samples

    def accept(self, samples: torch.Tensor) -> torch.Tensor:
        """samples (n,) float in [-1, 1] -> (T, F) float32 frames completed by them (T may be 0)."""
        if samples.dim() != 1:
            raise ValueError(f"expected 1-D samples (n,), got shape {tuple(samples.shape)}")
        if samples.numel():
            check_finite(samples)  # kaldi-native-fbank would fail deep inside, its stream left broken
            scaled = samples.detach().to(device="cpu", dtype=torch.float32) * self.config.sample_scale
            self._fbank.accept_waveform(SAMPLE_RATE, scaled.numpy())
            self._samples += samples.numel()
        return self._take()

    def finish(self) -> torch.Tensor:
        """End of the audio -> (T, F) the frames still owed (none for audio shorter than one window)."""
        self._fbank.input_finished()
        return self._take()

    def _take(self) -> torch.Tensor:
        ready = self._fbank.num_frames_ready
        if self._samples < self.config.window_samples or ready <= self._taken:
            return torch.zeros(0, self.config.num_mel_bins)
        frames = np.stack([self._fbank.get_frame(i) for i in range(self._taken, ready)])  # (T, F)
        self._fbank.pop(ready - self._taken)  # never read again: memory stays bounded
        self._taken = ready
        return apply_noise_floor(torch.from_numpy(frames), self.config)
