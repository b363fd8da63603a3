"""The embedded `synth` corpus: English sentences spoken by eSpeak NG voices.

Determinism: every utterance is a pure function of (seed, split, index). Its
sentence, voice and eSpeak noise seed come from `sentence_rng`, and eSpeak starts
from pristine state for every sentence (see `asr.synth.espeak`). Utterances are accepted strictly in index order until a
split reaches its hours, so the pool size never changes the result.
"""

from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing as mp
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import soundfile as sf
import torch
from lhotse import CutSet
from tqdm import tqdm

from asr.data.audio import float_to_int16, resample_int16
from asr.extras import require
from asr.synth.formants import draw_scale_rate, scale_frequencies
from asr.synth.utterance import UtteranceMeta, to_cut
from asr.synth.clean_copy import (CLEAN_MANIFEST, CLEAN_SPLIT, clean_copy_audio_path, clean_copy_id, fork_rng,
                                   start_clean_copies)
from asr.synth.capture import apply_capture, draw_capture
from asr.synth.conditions import ConditionRanges, apply_conditions, draw_conditions
from asr.synth.live import LiveRanges, apply_live, draw_live
from asr.synth.profiles import CLEAN_PROFILE, PROFILES, SynthProfile
from asr.synth.espeak import EspeakSynthesizer
from asr.data.features import SAMPLE_RATE
from asr.data.manifest import write_cuts
from asr.synth.sentences import SentenceGenerator, sentence_rng
from asr.synth.passages import is_passage, read_passage, with_noise_floor
from asr.synth.neural_tts import NeuralSynthesizer, NeuralVoice, draw_neural_voice
from asr.synth.pico import PicoSynthesizer, PicoVoice, draw_pico_voice
from asr.synth.voices import VoiceSetting, check_voices_exist, draw_voice

SPLITS = ("train", "dev", "test", "long")
# Synthesis workers are replaced after this many utterances: SVOX Pico leaks ~70 KB an
# utterance (asr.synth.pico); eSpeak and Pico start every utterance from fresh state, so
# which worker makes an utterance never changes it.
WORKER_MAX_TASKS = 2000
DURATION_BOUNDS = {"train": (1.0, 10.0), "dev": (1.0, 10.0), "test": (1.0, 10.0), "long": (20.0, 60.0)}
MAX_ATTEMPTS = 50


@dataclass(frozen=True)
class SynthConfig:
    out_dir: str
    seed: int = 0
    train_hours: float = 6.0
    dev_hours: float = 0.25
    test_hours: float = 0.25
    long_hours: float = 0.25
    workers: int = 2
    profile: str = "clean"

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"unknown synth profile {self.profile!r}; valid: {list(PROFILES)}")

    def hours(self, split: str) -> float:
        return {"train": self.train_hours, "dev": self.dev_hours, "test": self.test_hours,
                "long": self.long_hours}[split]


# per-process worker state, set once by _init_worker (Pico on first use: most profiles never need it)
_SYNTH: EspeakSynthesizer | None = None
_GEN: SentenceGenerator | None = None
_PICO: PicoSynthesizer | None = None
_NEURAL: NeuralSynthesizer | None = None


class Made(NamedTuple):
    """One synthesized utterance: its (n,) int16 audio, the conditions described (None: none), and the
    clean copy a clean-copy profile makes of a train utterance."""

    text: str
    voice: object
    audio: np.ndarray
    conditions: str | None
    clean: Made | None = None


def _init_worker() -> None:
    global _SYNTH, _GEN
    torch.set_num_threads(1)
    _SYNTH = EspeakSynthesizer()
    _GEN = SentenceGenerator()


def _say(text: str, voice, rng) -> np.ndarray:
    raw = _SYNTH.synthesize(text, voice.voice, voice.rate, voice.pitch, seed=rng.randrange(1, 2**31),
                            pitch_span=voice.pitch_span, word_gap=voice.word_gap)
    return resample_int16(raw, _SYNTH.sample_rate, SAMPLE_RATE)


def _say_pico(text: str, voice: PicoVoice) -> np.ndarray:
    global _PICO
    if _PICO is None:
        _PICO = PicoSynthesizer()
    return _PICO.synthesize(text, voice)


def _say_neural(text: str, voice: NeuralVoice) -> np.ndarray:
    global _NEURAL
    if _NEURAL is None:
        _NEURAL = NeuralSynthesizer()
    return _NEURAL.synthesize(text, voice)


def _with_conditions(audio: np.ndarray, rng, split: str, ranges: ConditionRanges) -> tuple[np.ndarray, str]:
    """(n,) int16 -> (n,) int16 under drawn acoustic conditions, and their description.

    Babble is other sentences by other train voices, synthesized here: the corpus
    carries no noise files, and every draw stays a function of the utterance's seed.
    """
    cond = draw_conditions(np.random.default_rng(rng.getrandbits(63)), ranges)
    babble = None
    if cond.noise == "babble":
        babble = [_say(_GEN(rng), draw_voice(rng, split, varied=True), rng).astype(np.float32) / 32768.0
                  for _ in range(cond.babble_talkers)]
    out = apply_conditions(audio.astype(np.float32) / 32768.0, cond, babble)
    return float_to_int16(out), cond.describe()


def _with_capture(audio: np.ndarray, rng, profile: SynthProfile) -> tuple[np.ndarray, str | None]:
    """(n,) int16 -> (n,) int16 through a capture path for ``profile.capture_share`` of the utterances,
    and the path described (None: untouched)."""
    if rng.random() >= profile.capture_share:
        return audio, None
    capture = draw_capture(np.random.default_rng(rng.getrandbits(63)), profile.capture)
    return float_to_int16(apply_capture(audio.astype(np.float32) / 32768.0, capture)), capture.describe()


def _with_live(audio: np.ndarray, rng, ranges: LiveRanges) -> tuple[np.ndarray, str | None]:
    """(n,) int16 -> (lead + n + tail,) int16 with a live background for ``ranges.share`` of the utterances,
    and the setting described (None: untouched)."""
    setting = draw_live(np.random.default_rng(rng.getrandbits(63)), ranges)
    if setting is None:
        return audio, None
    lived = apply_live(audio.astype(np.float32) / 32768.0, setting, ranges.below_peak_db)
    return float_to_int16(lived), setting.describe()


def _pad_with_floor(audio: np.ndarray, rng, profile: SynthProfile, longest_s: float) -> np.ndarray:
    """(n,) int16 -> (lead + n + trail,) int16: silence at both ends, a noise floor under it all.

    The padding never takes the utterance past ``longest_s``.
    """
    room = max(0.0, longest_s - len(audio) / SAMPLE_RATE) / 2
    lead, trail = (min(rng.uniform(*profile.edge_silence_s), room) for _ in range(2))
    padded = np.concatenate([np.zeros(int(lead * SAMPLE_RATE), dtype=np.int16), audio,
                             np.zeros(int(trail * SAMPLE_RATE), dtype=np.int16)])
    return with_noise_floor(padded, rng, profile.noise_floor_db)


@dataclass
class Speaker:
    """One drawn voice of any engine and how it reads a sentence: ``say(text)`` -> (n,) int16 at SAMPLE_RATE.

    ``voice`` is the setting recorded in the manifest. eSpeak's formant scale (when the profile
    scales formants) is drawn right after the speaker's first sentence is synthesized: the draw
    order single-sentence corpora were built with, which keeps them reproducible.
    """

    voice: VoiceSetting
    engine: str  # "espeak", "pico" or "neural"
    rng: object
    engine_voice: object = None  # PicoVoice / NeuralVoice for those engines
    formant_scale: tuple[float, float] | None = None  # eSpeak only
    resample_hz: int | None = None

    def say(self, text: str) -> np.ndarray:
        if self.engine == "pico":
            return _say_pico(text, self.engine_voice)
        if self.engine == "neural":
            return _say_neural(text, self.engine_voice)
        audio = _say(text, self.voice, self.rng)
        if self.formant_scale is None:
            return audio
        if self.resample_hz is None:
            self.resample_hz = draw_scale_rate(self.rng, self.formant_scale)
            self.voice = dataclasses.replace(self.voice, voice=f"{self.voice.voice}@{SAMPLE_RATE / self.resample_hz:.2f}")
        return scale_frequencies(audio, self.resample_hz)


def draw_speaker(rng, split: str, profile: SynthProfile = CLEAN_PROFILE) -> Speaker:
    """The engine and voice of one utterance (single sentence or passage), drawn from ``rng``.

    The engine is drawn only by profiles with another engine, so the others' draws stay as
    they were; one uniform picks it: [0, pico) Pico, [pico, pico + neural) neural, else eSpeak.
    """
    engine_draw = rng.random() if profile.pico_share > 0 or profile.neural_share > 0 else 1.0
    if engine_draw < profile.pico_share:
        pico_voice = draw_pico_voice(rng)
        voice = VoiceSetting(voice=pico_voice.name, rate=pico_voice.rate, pitch=pico_voice.pitch)
        return Speaker(voice, "pico", rng, pico_voice)
    if engine_draw < profile.pico_share + profile.neural_share:
        neural_voice = draw_neural_voice(rng, profile.neural_hibari_weight)
        voice = VoiceSetting(voice=neural_voice.name, rate=round(neural_voice.speed * 100), pitch=100)
        return Speaker(voice, "neural", rng, neural_voice)
    return Speaker(draw_voice(rng, split, profile.varied_voices), "espeak", rng,
                   formant_scale=profile.espeak_formant_scale)


def _short_utterance(rng, split: str, profile: SynthProfile = CLEAN_PROFILE) -> Made | None:
    """One sentence as :class:`Made`, or None outside the split's durations.

    ``profile`` is applied as given: the caller passes ``profile.for_split(split)``.
    """
    low, high = DURATION_BOUNDS[split]
    text = _GEN(rng)
    speaker = draw_speaker(rng, split, profile)
    audio = speaker.say(text)
    if not low <= len(audio) / SAMPLE_RATE <= high:
        return None
    return _finish(audio, rng, split, profile, speaker.voice, text, high)


def _finish(audio: np.ndarray, rng, split: str, profile: SynthProfile, voice, text: str, longest_s: float) -> Made:
    """The profile's edge silence, acoustic conditions and capture path on a made utterance."""
    clean = None
    if profile.clean_copy:  # from a copy of the RNG: the draws below stay as they were
        clean = _finish(audio, fork_rng(rng), split, profile.without_surroundings(), voice, text, longest_s)
    if profile.edge_silence_s is not None:
        audio = _pad_with_floor(audio, rng, profile, longest_s)
    described = None
    if profile.conditions is not None:
        audio, described = _with_conditions(audio, rng, split, profile.conditions)
    if profile.capture is not None:  # drawn last: every other profile's draws stay as they were
        audio, captured = _with_capture(audio, rng, profile)
        described = ",".join(d for d in (described, captured) if d) or None
    if profile.live is not None:  # after the capture draw, for the same reason
        audio, lived = _with_live(audio, rng, profile.live)
        described = ",".join(d for d in (described, lived) if d) or None
    return Made(text, voice, audio, described, clean)


def join_sentences(rng, voice, low: float, high: float, target: float) -> tuple[str, np.ndarray] | None:
    """Sentences by one voice joined by short pauses until ``target`` s, never past ``high`` s.

    A sentence that would overshoot ``high`` is skipped and another drawn (at most
    200 draws); None when the passage stays shorter than ``low``.
    Returns (text, (n,) int16 audio at SAMPLE_RATE).
    """
    texts, pieces, total = [], [], 0
    for _ in range(200):
        text = _GEN(rng)
        audio = _say(text, voice, rng)
        # A pause is drawn before every sentence, the first too (unused there): the draw order
        # is part of what makes a corpus reproducible from its seed.
        pause = np.zeros(int(rng.uniform(0.15, 0.5) * SAMPLE_RATE), dtype=np.int16)
        if (total + len(pause) + len(audio)) / SAMPLE_RATE > high:
            continue
        texts.append(text)
        pieces += [pause, audio] if pieces else [audio]
        total += (len(pause) if len(pieces) > 1 else 0) + len(audio)
        if total / SAMPLE_RATE >= target:
            break
    if total / SAMPLE_RATE < low:
        return None
    return " ".join(texts), np.concatenate(pieces)


def _passage_utterance(rng, split: str, profile: SynthProfile) -> Made | None:
    """A train passage (asr.synth.passages) by one speaker of the profile's engines, then the profile's
    edge silence and conditions; None when the drawn sentences do not make one."""
    speaker = draw_speaker(rng, split, profile)
    passage = read_passage(rng, speaker.say, _GEN, profile.passages)
    if passage is None:
        return None
    text, audio = passage
    return _finish(audio, rng, split, profile, speaker.voice, text, profile.passages.seconds[1])


def _long_utterance(rng, split: str, profile: SynthProfile | None = None) -> Made | None:
    """Several sentences by one voice joined by short pauses, 20-60 s in all (clean in every profile: evaluation)."""
    low, high = DURATION_BOUNDS[split]
    voice = draw_voice(rng, split)
    passage = join_sentences(rng, voice, low, high, rng.uniform(low + 5.0, high - 5.0))
    return None if passage is None else Made(passage[0], voice, passage[1], None)


def _make_copies(job: tuple[int, str, int, str, str]) -> tuple[UtteranceMeta, UtteranceMeta | None]:
    """Pool task: synthesize utterance `index` of `split`, write its FLAC file and, for a clean-copy
    profile's train split, its clean copy's (asr.synth.clean_copy); their records."""
    seed, split, index, out_dir, profile_name = job
    profile = PROFILES[profile_name].for_split(split)
    make = _long_utterance if split == "long" else _short_utterance
    passage = profile.passages is not None and is_passage(seed, index, profile.passages.share)
    if passage:
        make = _passage_utterance
    for attempt in range(MAX_ATTEMPTS):
        result = make(sentence_rng(seed, split, index, attempt), split, profile)
        if result is not None:
            break
    else:
        raise RuntimeError(f"no {split} utterance within {DURATION_BOUNDS[split]} s after {MAX_ATTEMPTS} tries")
    cut_id = f"{split}-{index:06d}"
    meta = _write(out_dir, cut_id, f"audio/{split}/{cut_id}.flac", result, profile, passage)
    if result.clean is None:
        return meta, None
    return meta, _write(out_dir, clean_copy_id(cut_id), clean_copy_audio_path(cut_id), result.clean,
                        profile.without_surroundings(), passage)


def _write(out_dir: str, cut_id: str, rel_path: str, made: Made, profile: SynthProfile, passage: bool
           ) -> UtteranceMeta:
    """Write ``made``'s FLAC file at ``rel_path`` under ``out_dir``; its record."""
    conditions, voice = made.conditions, made.voice
    if conditions is None and not profile.is_clean:
        conditions = "none"  # a profile without acoustic conditions; the voice settings are still recorded
    sf.write(Path(out_dir) / rel_path, made.audio, SAMPLE_RATE, format="FLAC", subtype="PCM_16")
    return UtteranceMeta(cut_id, rel_path, made.text, voice.voice, voice.rate, voice.pitch, len(made.audio),
                         voice.pitch_span, voice.word_gap, conditions, passage)


def start_pool(workers: int):
    """Set up synthesis in this process and return a pool of ``workers`` (None for one).

    The parent is set up first so a missing library or voice fails here, not in a worker.
    """
    _init_worker()
    check_voices_exist(_SYNTH.data_path)
    return mp.get_context("fork").Pool(workers, initializer=_init_worker,
                                           maxtasksperchild=WORKER_MAX_TASKS) if workers > 1 else None


def build_split(cfg: SynthConfig, split: str, pool=None) -> tuple[CutSet, float]:
    """Synthesize one split; returns its cuts and the seconds of audio made. The train split of a
    clean-copy profile writes its clean copies' manifest (asr.synth.clean_copy) here too."""
    target = cfg.hours(split) * 3600.0
    audio_dir = Path(cfg.out_dir) / "audio" / split
    audio_dir.mkdir(parents=True, exist_ok=True)
    for stale in audio_dir.glob("*.flac"):
        stale.unlink()
    clean_copies = PROFILES[cfg.profile].for_split(split).clean_copy
    if split == "train":
        start_clean_copies(cfg.out_dir, clean_copies)
    mapper = pool.imap if pool is not None else map
    metas: list[UtteranceMeta] = []
    clean_metas: list[UtteranceMeta] = []
    total = 0.0
    next_index = 0
    mean_guess = 40.0 if split == "long" else 3.5
    with tqdm(total=round(target), unit="s", desc=f"synth {split}", leave=True) as bar:
        while total < target:
            # a bounded batch; results past the target are discarded so the split ends at the same index
            n = max(2 * max(cfg.workers, 1), math.ceil((target - total) / mean_guess))
            jobs = ((cfg.seed, split, i, cfg.out_dir, cfg.profile) for i in range(next_index, next_index + n))
            next_index += n
            for meta, clean in mapper(_make_copies, jobs):
                if total >= target:
                    for made in (meta, clean) if clean is not None else (meta,):
                        (Path(cfg.out_dir) / made.audio_path).unlink()
                    continue
                metas.append(meta)
                if clean is not None:
                    clean_metas.append(clean)
                seconds = meta.num_samples / SAMPLE_RATE
                total += seconds
                bar.update(round(total) - bar.n)
    if clean_copies:
        write_cuts(CutSet.from_cuts(to_cut(m) for m in clean_metas), Path(cfg.out_dir) / CLEAN_MANIFEST)
    return CutSet.from_cuts(to_cut(m) for m in metas), total


def build_synth_corpus(cfg: SynthConfig, force: bool = False, log=print) -> dict:
    """Build every split missing from `cfg.out_dir` (all of them with force) and the summary."""
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    todo = [s for s in SPLITS if force or not (out / f"cuts_{s}.jsonl.gz").is_file()]
    built_profile = corpus_profile(out)
    if "train" not in todo and (built_profile or "clean") != cfg.profile:
        log(f"train: built with profile {built_profile!r}, {cfg.profile!r} asked: rebuilding it")
        todo.insert(0, "train")
    if "train" not in todo and PROFILES[cfg.profile].clean_copy and not (out / CLEAN_MANIFEST).is_file():
        log(f"train: its clean copies ({CLEAN_MANIFEST}) are missing: rebuilding it")
        todo.insert(0, "train")
    made_seconds, started = 0.0, time.perf_counter()
    if todo:
        require("espeakng_loader", "synth", "the synth corpus")  # here, not in a pool worker's initializer
    if "train" in todo and PROFILES[cfg.profile].pico_share > 0:
        PicoSynthesizer()  # without ttspico: say how to install it now, not from inside a pool worker
    if "train" in todo and PROFILES[cfg.profile].neural_share > 0:
        NeuralSynthesizer()  # the same for the neural voices' wheels
    if todo:
        pool = start_pool(cfg.workers)
        try:
            for split in todo:
                if cfg.hours(split) <= 0:
                    continue
                cuts, seconds = build_split(cfg, split, pool)
                write_cuts(cuts, out / f"cuts_{split}.jsonl.gz")
                made_seconds += seconds
        finally:
            if pool is not None:
                pool.close()
                pool.join()
    for split in SPLITS:
        if split not in todo and (out / f"cuts_{split}.jsonl.gz").is_file():
            log(f"{split}: already built (use --force to rebuild)")
    elapsed = time.perf_counter() - started
    summary = summarize_corpus(out, cfg.seed, cfg.profile)
    (out / "manifest_summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    for split, info in summary["splits"].items():
        log(f"{split:>5}: {info['utterances']:6d} utts  {info['hours']:.3f} h  {info['voices']:4d} voices  "
            f"{info['distinct_words']:5d} distinct words  {info['min_duration']:.1f}-{info['max_duration']:.1f} s")
    if made_seconds > 0:
        log(f"synthesized {made_seconds / 3600:.3f} h in {elapsed:.1f} s = {made_seconds / elapsed:.0f}x real time "
            f"({cfg.workers} workers)")
    return summary


def corpus_profile(out_dir: str | Path) -> str | None:
    """The profile the corpus in out_dir was built with (corpora from before profiles: clean); None if none is."""
    summary = Path(out_dir) / "manifest_summary.json"
    if not summary.is_file():
        return None
    return json.loads(summary.read_text()).get("profile", "clean")


def summarize_corpus(out_dir: str | Path, seed: int | None = None, profile: str = "clean") -> dict:
    """Per-split counts read back from the manifests (deterministic: no timings); the train split's clean
    copies (asr.synth.clean_copy) count as the split ``train_clean``."""
    splits = {}
    for split in (*SPLITS, CLEAN_SPLIT):
        path = Path(out_dir) / f"cuts_{split}.jsonl.gz"
        if not path.is_file():
            continue
        cuts = list(CutSet.from_file(path))
        durations = [c.duration for c in cuts] or [0.0]
        words = {w for c in cuts for s in c.supervisions for w in s.text.split()}
        splits[split] = {
            "utterances": len(cuts), "hours": round(sum(durations) / 3600, 4),
            "voices": len({c.custom["voice"] for c in cuts}), "distinct_words": len(words),
            "min_duration": round(min(durations), 3), "max_duration": round(max(durations), 3),
        }
        passages = [c.duration for c in cuts if c.custom and c.custom.get("passage")]
        if passages:
            splits[split].update(passages=len(passages), passage_hours=round(sum(passages) / 3600, 4))
    return {"corpus": "synth", "seed": seed, "profile": profile, "sample_rate": SAMPLE_RATE, "splits": splits}
