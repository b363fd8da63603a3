"""Digital silence (exact zeros) must not change what is recognized around it (issue 38).

A muted microphone, padding, a device before its first sound: exact zeros. Without a
floor their log-mel frames are log(float eps) = -15.9 in every bin against ~+15 for
speech; the global CMVN maps them far outside anything trained, and the online CMN's
running mean takes them in, shifting every later frame. With ``features.noise_floor_dbfs``
a silent frame is the floor's frame, what faint noise at that level gives on average.

The check: speech surrounded by and interrupted with zeros against the same speech over
white noise at the floor's level, through the whole frontend and model (CTC log-probs on
the speech frames), offline full context, chunk-masked, and streamed piece by piece, with
online CMN off and on. With the floor the two agree closely; without it they do not (the
test's own control, so it can fail).
"""

import dataclasses

import numpy as np
import pytest
import torch

from asr.data.features import LEGACY, SAMPLE_RATE, SHERPA, FbankExtractor
from asr.streaming.frontend import StreamingFrontend
from tests.serve.helpers import fitted_model, tiny_tokenizer

FLOOR_DBFS = -90.0
FLOORED = dataclasses.replace(LEGACY, noise_floor_dbfs=FLOOR_DBFS)
C, LEFT = 4, 2


def speech_and_gaps(seed: int = 0):
    """(with zeros, with the floor's noise, speech frame ranges): 0.5 s gap, speech, 1.5 s gap, speech, 0.5 s gap."""
    g = np.random.default_rng(seed)
    t = np.arange(int(1.2 * SAMPLE_RATE)) / SAMPLE_RATE
    speech = [0.2 * np.sin(2 * np.pi * f * t) * np.clip(np.sin(2 * np.pi * 3 * t), 0, None)
              + 0.02 * g.standard_normal(t.size) for f in (220.0, 330.0)]
    gaps = [int(s * SAMPLE_RATE) for s in (0.5, 1.5, 0.5)]
    zeros = np.concatenate([np.zeros(gaps[0]), speech[0], np.zeros(gaps[1]), speech[1], np.zeros(gaps[2])])
    floor = zeros + g.standard_normal(zeros.size) * 10 ** (FLOOR_DBFS / 20)
    hop = SAMPLE_RATE // 100
    first = (gaps[0] // hop + 3, (gaps[0] + t.size) // hop - 3)
    second_start = gaps[0] + t.size + gaps[1]
    second = (second_start // hop + 3, (second_start + t.size) // hop - 3)
    return torch.from_numpy(zeros), torch.from_numpy(floor), (first, second)


def encoder_frames(span: tuple[int, int]) -> slice:
    return slice(span[0] // 4 + 1, span[1] // 4 - 1)  # 4x subsampling, a frame of margin


def log_probs(model, features, wave: torch.Tensor, how: str) -> torch.Tensor:
    """(T', V) CTC log-probs of ``wave`` through ``features`` and the model: offline full / chunked, or streamed."""
    enc = model.encoder
    with torch.no_grad():
        if how in ("full", "chunked"):
            feats = FbankExtractor(features)(wave.float()).unsqueeze(0)  # (1, T, F)
            out, _ = model.encode(feats, torch.tensor([feats.size(1)]), chunk_size=0 if how == "full" else C,
                                  left_chunks=-1 if how == "full" else LEFT)
            return model.ctc_log_probs(out)[0]
        frontend = StreamingFrontend(features, enc.online_cmn())
        state = enc.init_state(1, C, LEFT)
        outs = []
        for start in range(0, wave.numel(), 1234):  # pieces of 77 ms
            feats = frontend.accept(wave[start:start + 1234].float())
            if feats is not None and feats.numel():
                out, state = enc.stream_step(feats.unsqueeze(0), state)
                outs.append(out)
        tail = frontend.finish()
        out, state = enc.stream_step((tail if tail is not None else torch.zeros(0, enc.input_dim)).unsqueeze(0),
                                     state, final=True)
        outs.append(out)
        return model.ctc_log_probs(torch.cat(outs, dim=1))[0]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.mark.parametrize("how", ["full", "chunked", "streamed"])
@pytest.mark.parametrize("online_cmn", [0.0, 100.0], ids=["global_cmvn", "online_cmn"])
def test_zeros_decode_as_a_low_noise_floor_does(tokenizer, how, online_cmn):
    zeros, floor, spans = speech_and_gaps()
    model = fitted_model(tokenizer)
    model.encoder.online_cmn_frames = online_cmn
    gaps = {}
    # sherpa: the quickstart's frontend, no explicit floor: kaldi-native-fbank on samples in [-1, 1]
    # clamps each mel energy at float eps (about -70 dBFS), which must act as the floor does.
    for name, features in (("floored", FLOORED), ("sherpa", SHERPA), ("plain", LEGACY)):
        a, b = log_probs(model, features, zeros, how), log_probs(model, features, floor, how)
        speech = torch.cat([torch.arange(a.size(0))[encoder_frames(s)] for s in spans])
        gaps[name] = float((a[speech] - b[speech]).abs().max())
    assert gaps["floored"] < 0.25 * gaps["plain"], gaps
    assert gaps["sherpa"] < 0.25 * gaps["plain"], gaps
