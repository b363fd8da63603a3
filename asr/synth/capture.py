"""Capture paths: what a microphone, a browser or a network does to speech before a recognizer hears it.

A model trained on synthesized audio delivered one way reads a browser's capture of
the same sentences at ~70% WER: the 48 kHz round trip, the gain control,
the noise suppressor. Each function here is one such path, a family of effects with
its parameters drawn per utterance:

- ``resample``: up to 44.1/48 kHz (a microphone's rate) with a mic's noise floor
  there, and back, through proper band-limited resampling;
- ``resample_aliased``: the same round trip with no low-pass (a driver repeating
  samples, a page dropping them): images and the floor above 8 kHz fold onto the
  speech band;
- ``agc``: an automatic gain control riding the level (fast attack, slow release, a
  gain ceiling), lifting the mic's floor in the pauses;
- ``denoise``: room noise, then a spectral-subtraction noise suppressor (minimum
  statistics noise estimate, over-subtraction, a spectral floor): musical noise;
- ``telephone``: a narrow band at 8 kHz with 8-bit G.711 companding;
- ``codec``: a lossy codec through libsndfile (``soundfile``: MP3, Ogg/Vorbis, Opus;
  pip only);
- ``clip``: driven past full scale and clipped (hard or soft).

:class:`CaptureRanges` says which families are drawn and from what parameter ranges;
:data:`EVAL_RANGES` makes the ``capture`` evaluation splits (:func:`build_capture_split`),
:data:`TRAIN_RANGES` the training side (the same families, other parameters), baked into
a synth profile's train split at synthesis time. Every draw comes from the numpy
Generator handed in; an evaluation utterance's generator is seeded from the corpus seed
and its cut id, so the split is a function of its source split.

Audio here is float32 in [-1, 1], shape (n,), at ``SAMPLE_RATE``; every path returns n samples.
"""

from __future__ import annotations

import io
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
from lhotse import CutSet
from numpy.lib.stride_tricks import sliding_window_view
from tqdm import tqdm

from asr.data.audio import cached_resampler, float_to_int16
from asr.data.dataset import cut_text
from asr.data.features import SAMPLE_RATE
from asr.data.manifest import read_cuts, write_cuts
from asr.synth.conditions import COMPANDING_LAWS, NOISE_COLOURS, coloured_noise, telephone_channel
from asr.synth.utterance import UtteranceMeta, to_cut

FAMILIES = ("resample", "resample_aliased", "agc", "denoise", "telephone", "codec", "clip")
CODECS = {"mp3": ("MP3", "MPEG_LAYER_III"), "vorbis": ("OGG", "VORBIS"), "opus": ("OGG", "OPUS")}
CAPTURE_FILE = "cuts_capture.jsonl.gz"
CAPTURE_SOURCES = ("test", "dev")
Range = tuple[float, float]


@dataclass(frozen=True)
class CaptureRanges:
    """Which capture families are drawn (uniformly) and the ranges their parameters come from (uniform)."""

    families: tuple[str, ...] = FAMILIES
    rates: tuple[int, ...] = (44100, 48000)  # the microphone's rate in both resample families
    mic_floor_dbfs: Range = (-70.0, -55.0)  # white noise floor at the mic's rate (resample, agc)
    agc_target_dbfs: Range = (-20.0, -14.0)  # RMS level the gain control steers to
    agc_attack_ms: Range = (5.0, 20.0)
    agc_release_ms: Range = (300.0, 800.0)
    agc_max_gain_db: Range = (20.0, 30.0)
    noise_colours: tuple[str, ...] = ("pink", "brown")
    noise_snr_db: Range = (8.0, 18.0)
    oversubtraction: Range = (2.0, 3.0)  # denoise: noise power times this is subtracted
    spectral_floor: Range = (0.005, 0.02)  # denoise: the smallest power gain
    telephone_laws: tuple[str, ...] = ("mu",)
    telephone_low_hz: Range = (300.0, 300.0)
    telephone_high_hz: Range = (3400.0, 3400.0)
    codecs: tuple[str, ...] = ("mp3",)
    codec_compression: Range = (0.6, 0.95)  # libsndfile's compression level in [0, 1): higher = fewer bits
    clip_drive_db: Range = (6.0, 14.0)  # peak driven this far past full scale
    soft_clip_share: float = 0.0  # of the clipped utterances: tanh instead of a hard limit

    def __post_init__(self) -> None:
        for name, valid in (("families", FAMILIES), ("noise_colours", tuple(NOISE_COLOURS)),
                            ("telephone_laws", COMPANDING_LAWS), ("codecs", tuple(CODECS))):
            chosen = getattr(self, name)
            if not chosen or not set(chosen) <= set(valid):
                raise ValueError(f"{name} must be a non-empty subset of {valid}, got {chosen}")
        if any(rate <= SAMPLE_RATE for rate in self.rates) or not self.rates:
            raise ValueError(f"rates must be above {SAMPLE_RATE} Hz (a round trip up and back), got {self.rates}")
        for name in ("mic_floor_dbfs", "agc_target_dbfs", "agc_attack_ms", "agc_release_ms", "agc_max_gain_db",
                     "noise_snr_db", "oversubtraction", "spectral_floor", "telephone_low_hz", "telephone_high_hz",
                     "codec_compression", "clip_drive_db"):
            low, high = getattr(self, name)
            if low > high:
                raise ValueError(f"{name} range is empty: {low} > {high}")
        if not (0.0 < self.agc_attack_ms[0] and 0.0 < self.agc_release_ms[0] and self.agc_target_dbfs[1] < 0.0):
            raise ValueError("agc times must be > 0 ms and its target below 0 dBFS")
        if not (0.0 < self.spectral_floor[0] and self.spectral_floor[1] <= 1.0):
            raise ValueError(f"spectral_floor must lie in (0, 1], got {self.spectral_floor}")
        if not (0.0 <= self.codec_compression[0] and self.codec_compression[1] < 1.0):
            raise ValueError(f"codec_compression must lie in [0, 1) (MP3 refuses 1.0), got {self.codec_compression}")
        if not 0.0 <= self.soft_clip_share <= 1.0:
            raise ValueError(f"soft_clip_share must be in [0, 1], got {self.soft_clip_share}")
        if not (0.0 < self.telephone_low_hz[0] and self.telephone_low_hz[1] < self.telephone_high_hz[0]
                and self.telephone_high_hz[1] < 4000.0):
            raise ValueError("the telephone band must lie inside (0, 4000) Hz, low edge below high edge")


# The evaluation split's paths: what a browser and a network do.
EVAL_RANGES = CaptureRanges()
# The training side: the same families, other parameters (other rates, levels, noises,
# companding law, codecs, clipping), so the evaluation split stays unseen.
TRAIN_RANGES = CaptureRanges(
    rates=(22050, 24000, 32000, 96000), mic_floor_dbfs=(-80.0, -60.0),
    agc_target_dbfs=(-28.0, -21.0), agc_attack_ms=(1.0, 4.0), agc_release_ms=(900.0, 2500.0),
    agc_max_gain_db=(10.0, 19.0), noise_colours=("white",), noise_snr_db=(19.0, 30.0),
    oversubtraction=(1.0, 1.9), spectral_floor=(0.03, 0.1), telephone_laws=("a",),
    telephone_low_hz=(150.0, 280.0), telephone_high_hz=(3500.0, 3800.0), codecs=("vorbis", "opus"),
    codec_compression=(0.3, 0.99), clip_drive_db=(1.0, 5.5), soft_clip_share=0.5,
)


@dataclass(frozen=True)
class Capture:
    """One utterance's capture path: a family and its drawn parameters (``seed``: its noises)."""

    family: str
    params: tuple[tuple[str, float | int | str], ...] = ()
    seed: int = 0

    def describe(self) -> str:
        """A short tag for the manifest, e.g. 'agc(target=-17,attack=9,release=512,max_gain=24,floor=-61)'."""
        def fmt(value):
            return f"{value:.3g}" if isinstance(value, float) else str(value)
        return f"{self.family}({','.join(f'{k}={fmt(v)}' for k, v in self.params)})"


def _u(rng: np.random.Generator, bounds: Range) -> float:
    return float(rng.uniform(bounds[0], bounds[1]))


def draw_capture(rng: np.random.Generator, ranges: CaptureRanges) -> Capture:
    """One utterance's path. The draw order is fixed: it is part of a corpus's reproducibility."""
    family = str(rng.choice(ranges.families))
    r = ranges
    if family in ("resample", "resample_aliased"):
        params = {"rate": int(rng.choice(r.rates)), "floor": _u(rng, r.mic_floor_dbfs)}
        if family == "resample_aliased":
            params["phase"] = float(rng.uniform(0.0, 1.0))  # where the decimation grid falls
    elif family == "agc":
        params = {"target": _u(rng, r.agc_target_dbfs), "attack": _u(rng, r.agc_attack_ms),
                  "release": _u(rng, r.agc_release_ms), "max_gain": _u(rng, r.agc_max_gain_db),
                  "floor": _u(rng, r.mic_floor_dbfs)}
    elif family == "denoise":
        params = {"noise": str(rng.choice(r.noise_colours)), "snr": _u(rng, r.noise_snr_db),
                  "alpha": _u(rng, r.oversubtraction), "beta": _u(rng, r.spectral_floor)}
    elif family == "telephone":
        params = {"law": str(rng.choice(r.telephone_laws)), "low": _u(rng, r.telephone_low_hz),
                  "high": _u(rng, r.telephone_high_hz)}
    elif family == "codec":
        params = {"codec": str(rng.choice(r.codecs)), "compression": _u(rng, r.codec_compression)}
    else:
        params = {"drive": _u(rng, r.clip_drive_db), "soft": int(rng.random() < r.soft_clip_share)}
    return Capture(family, tuple(params.items()), seed=int(rng.integers(0, 2**31 - 1)))


# ---- the paths: (n,) float64 -> (n,) float64 ------------------------------------------------


def _db(x: float) -> float:
    return 10.0 ** (x / 20.0)


def _round_trip(x: np.ndarray, rate: int, floor_dbfs: float, rng: np.random.Generator) -> np.ndarray:
    up = cached_resampler(SAMPLE_RATE, rate)(torch.from_numpy(x.astype(np.float32))).numpy().astype(np.float64)
    up += rng.standard_normal(up.size) * _db(floor_dbfs)
    down = cached_resampler(rate, SAMPLE_RATE)(torch.from_numpy(up.astype(np.float32))).numpy().astype(np.float64)
    return np.pad(down, (0, max(0, x.size - down.size)))[: x.size]


def _aliased_round_trip(x: np.ndarray, rate: int, floor_dbfs: float, phase: float,
                        rng: np.random.Generator) -> np.ndarray:
    """Up by repeating samples, down by dropping them (``phase``: where the kept ones fall), no low-pass
    either way: the images and the floor above 8 kHz fold onto the speech band. At 48 kHz (x3) the
    speech comes back whole and only the floor folds; at 44.1 kHz samples are repeated and dropped
    unevenly (jitter of up to one sample)."""
    up_len = int(np.ceil(x.size * rate / SAMPLE_RATE))
    up = x[np.minimum(np.arange(up_len) * SAMPLE_RATE // rate, x.size - 1)]
    up = up + rng.standard_normal(up.size) * _db(floor_dbfs)
    kept = np.minimum(np.floor((np.arange(x.size) + phase) * rate / SAMPLE_RATE).astype(np.int64), up.size - 1)
    return up[kept]


def _agc(x: np.ndarray, target: float, attack: float, release: float, max_gain: float, floor: float,
         rng: np.random.Generator) -> np.ndarray:
    """Gain steered per 10 ms frame toward ``target`` dBFS RMS (cut fast, raised slowly, at most ``max_gain``
    dB), interpolated per sample, then a hard limit at full scale."""
    x = x + rng.standard_normal(x.size) * _db(floor)
    hop = SAMPLE_RATE // 100
    frames = -(-x.size // hop)
    padded = np.pad(x, (0, frames * hop - x.size)).reshape(frames, hop)  # (frames, hop)
    level = 10.0 * np.log10(np.mean(padded**2, axis=1) + 1e-12)
    wanted = np.clip(target - level, -40.0, max_gain)
    up_step, down_step = (1.0 - np.exp(-10.0 / t) for t in (release, attack))
    gain_db = np.empty(frames)
    gain = 0.0
    for i, want in enumerate(wanted):
        gain += (down_step if want < gain else up_step) * (want - gain)
        gain_db[i] = gain
    per_sample = np.interp(np.arange(x.size), np.arange(frames) * hop + hop / 2, gain_db)
    return np.clip(x * 10.0 ** (per_sample / 20.0), -1.0, 1.0)


# Stationary noise's power over its minimum in these windows (measured on white noise: 2.69): the
# minimum of a fluctuating estimate sits well below the mean it estimates.
MIN_STATS_BIAS = 2.7


def _denoise(x: np.ndarray, noise: str, snr: float, alpha: float, beta: float,
             rng: np.random.Generator) -> np.ndarray:
    """Room noise at ``snr`` dB, then power spectral subtraction: |S|^2 = max(|X|^2 - alpha N, beta |X|^2),
    N the minimum of the smoothed power over 0.8 s windows times MIN_STATS_BIAS (minimum statistics),
    the noisy phase kept."""
    speech_power = max(float(np.mean(x**2)), 1e-12)
    noisy = x + coloured_noise(x.size, noise, rng).astype(np.float64) * np.sqrt(speech_power / 10 ** (snr / 10))
    n_fft, hop = 512, 128
    window = torch.hann_window(n_fft, dtype=torch.float64)
    spec = torch.stft(torch.from_numpy(noisy), n_fft, hop, window=window, return_complex=True).numpy()  # (F, T)
    power = np.abs(spec) ** 2
    smoothed = np.empty_like(power)
    smoothed[:, 0] = power[:, 0]
    for t in range(1, power.shape[1]):
        smoothed[:, t] = 0.8 * smoothed[:, t - 1] + 0.2 * power[:, t]
    span = min(int(0.8 * SAMPLE_RATE / hop), power.shape[1])
    edge = np.pad(smoothed, ((0, 0), (span // 2, span - 1 - span // 2)), mode="edge")
    noise_power = MIN_STATS_BIAS * sliding_window_view(edge, span, axis=1).min(axis=-1)  # (F, T)
    gain = np.sqrt(np.maximum(1.0 - alpha * noise_power / np.maximum(power, 1e-20), beta))
    out = torch.istft(torch.from_numpy(spec * gain), n_fft, hop, window=window, length=x.size).numpy()
    return out


def _telephone(x: np.ndarray, law: str, low: float, high: float) -> np.ndarray:
    peak = max(float(np.max(np.abs(x))), 1e-9)
    # torchaudio's biquads clamp to [-1, 1]: filter far below it, give the level back afterwards
    wav = torch.from_numpy((x * 0.01 / peak).astype(np.float32))
    return telephone_channel(wav, (low, high), law).numpy().astype(np.float64) * peak / 0.01


def _codec(x: np.ndarray, codec: str, compression: float) -> np.ndarray:
    container, subtype = CODECS[codec]
    buffer = io.BytesIO()
    sf.write(buffer, np.clip(x, -1.0, 1.0).astype(np.float32), SAMPLE_RATE, format=container, subtype=subtype,
             compression_level=compression)
    buffer.seek(0)
    decoded, rate = sf.read(buffer, dtype="float64")
    if rate != SAMPLE_RATE:
        raise RuntimeError(f"{codec} came back at {rate} Hz, not {SAMPLE_RATE}")
    return np.pad(decoded, (0, max(0, x.size - decoded.size)))[: x.size]


def _clip(x: np.ndarray, drive: float, soft: int) -> np.ndarray:
    driven = x * _db(drive) / max(float(np.max(np.abs(x))), 1e-9)
    return np.tanh(driven) if soft else np.clip(driven, -1.0, 1.0)


def apply_capture(audio: np.ndarray, capture: Capture) -> np.ndarray:
    """(n,) float -> (n,) float32 through ``capture``'s path (its noises from ``capture.seed``), within [-1, 1]."""
    if audio.ndim != 1:
        raise ValueError(f"expected mono audio of shape (n,), got {audio.shape}")
    if audio.size == 0:
        return audio.astype(np.float32)
    x = audio.astype(np.float64)
    p = dict(capture.params)
    rng = np.random.default_rng(capture.seed)
    if capture.family == "resample":
        out = _round_trip(x, p["rate"], p["floor"], rng)
    elif capture.family == "resample_aliased":
        out = _aliased_round_trip(x, p["rate"], p["floor"], p["phase"], rng)
    elif capture.family == "agc":
        out = _agc(x, p["target"], p["attack"], p["release"], p["max_gain"], p["floor"], rng)
    elif capture.family == "denoise":
        out = _denoise(x, p["noise"], p["snr"], p["alpha"], p["beta"], rng)
    elif capture.family == "telephone":
        out = _telephone(x, p["law"], p["low"], p["high"])
    elif capture.family == "codec":
        out = _codec(x, p["codec"], p["compression"])
    elif capture.family == "clip":
        out = _clip(x, p["drive"], p["soft"])
    else:
        raise ValueError(f"unknown capture family {capture.family!r}; valid: {FAMILIES}")
    peak = float(np.max(np.abs(out)))
    if peak > 1.0:  # a path that overshoots (a filter's ringing, a codec) is scaled back, as a limiter would
        out = out / peak
    return out.astype(np.float32)


# ---- the evaluation splits -------------------------------------------------------------------


def capture_file(source_split: str = "test") -> str:
    """The manifest of ``source_split`` through the capture paths: cuts_capture (test), cuts_capture_<split>."""
    return CAPTURE_FILE if source_split == "test" else f"cuts_capture_{source_split}.jsonl.gz"


def utterance_rng(seed: int, cut_id: str) -> np.random.Generator:
    """The generator of one evaluation utterance: a function of the corpus seed and the cut id alone."""
    return np.random.default_rng([seed, zlib.crc32(cut_id.encode())])


@dataclass
class CaptureResult:
    """What :func:`build_capture_split` wrote, per family, and what it skipped (by reason)."""

    cuts: CutSet
    families: Counter = field(default_factory=Counter)
    skipped: Counter = field(default_factory=Counter)


def build_capture_split(data_dir: str | Path, source_split: str = "test", seed: int = 0,
                        ranges: CaptureRanges = EVAL_RANGES, max_utts: int | None = None) -> CaptureResult:
    """Pass every cut of ``cuts_<source_split>`` through one capture path drawn for it; write the split.

    Audio goes to ``audio/capture/<source_split>/<cut id>.flac``; cut ids are
    ``capture-<source cut id>``; ``custom["capture"]`` describes the path. A source cut
    that cannot be read is skipped and counted.
    """
    out = Path(data_dir)
    source = out / f"cuts_{source_split}.jsonl.gz"
    if not source.is_file():
        raise FileNotFoundError(f"{source} not found: prepare the corpus first (python scripts/prepare_data.py)")
    folder = out / "audio" / "capture" / source_split
    folder.mkdir(parents=True, exist_ok=True)
    result = CaptureResult(CutSet.from_cuts([]))
    cuts = []
    sources = list(read_cuts(source, out))[:max_utts]
    for cut in tqdm(sources, unit="utt", desc=f"capture ({source_split})"):
        try:
            audio = cut.load_audio()[0]
        except Exception as err:  # noqa: BLE001 - lhotse raises many kinds; the cut is skipped and counted
            result.skipped[f"unreadable: {type(err).__name__}"] += 1
            continue
        capture = draw_capture(utterance_rng(seed, cut.id), ranges)
        samples = float_to_int16(apply_capture(audio, capture))
        rel_path = f"audio/capture/{source_split}/{cut.id}.flac"
        sf.write(out / rel_path, samples, SAMPLE_RATE, format="FLAC", subtype="PCM_16")
        speaker = cut.supervisions[0].speaker or "unknown"
        meta = UtteranceMeta(f"capture-{cut.id}", rel_path, cut_text(cut), speaker, 0, 0, samples.size)
        new = to_cut(meta)
        new.custom = {"capture": capture.describe(), "family": capture.family, "voice": speaker,
                      "speaker": speaker, "source_cut": cut.id}
        cuts.append(new)
        result.families[capture.family] += 1
    result.cuts = CutSet.from_cuts(cuts)
    write_cuts(result.cuts, out / capture_file(source_split))
    return result
