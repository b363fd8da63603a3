"""asr.train.onsets: speech onsets moved to a chunk's last frames in training."""

import itertools
import math

import pytest
import torch

from asr.model.subsampling import Conv2dSubsampling, receptive_window
from asr.train.chunks import DynamicChunkSampler
from asr.train.onsets import (
    edge_shifts, first_seeing_frame, place_onsets_at_chunk_edges, prepend_background, speech_onsets,
)

BINS = 8
QUIET, LOUD = -12.0, 2.0  # natural-log mel energies: room tone and speech, 14 nepers (61 dB) apart


def batch(onsets, lengths):
    """(B, T, F) background up to each onset, speech after; feat_lens (B,)."""
    feats = torch.zeros(len(onsets), max(lengths), BINS)
    for i, (onset, length) in enumerate(zip(onsets, lengths)):
        feats[i, :onset] = QUIET + 0.1 * torch.randn(onset, BINS, generator=torch.Generator().manual_seed(i))
        feats[i, onset:length] = LOUD + torch.arange(length - onset)[:, None].remainder(3) * 0.5 - 0.1 * torch.arange(BINS)
    return feats, torch.tensor(lengths)


def test_speech_onsets_find_the_first_loud_frame_and_ignore_padding():
    feats, lens = batch([0, 5, 37], [20, 30, 60])
    assert speech_onsets(feats, lens).tolist() == [0, 5, 37]
    # a padding frame louder than the speech does not move the peak
    feats[0, 25:] = 50.0
    assert speech_onsets(feats, lens).tolist() == [0, 5, 37]
    # a frame 20 dB under the peak is speech (within 30 dB), one 40 dB under is not
    feats[2, 30] = feats[2, 39] - 20 * math.log(10) / 10
    feats[2, 29] = feats[2, 39] - 40 * math.log(10) / 10
    assert speech_onsets(feats, lens)[2] == 30


def test_a_time_mask_in_the_background_is_not_an_onset():
    """SpecAugment fills a time mask with the utterance's mean: louder than room tone, flat across bins."""
    feats, lens = batch([40], [80])
    feats[0, 10:20] = feats[0, :80].mean()
    assert speech_onsets(feats, lens).tolist() == [40]


@pytest.mark.parametrize("rate", [4, 6, 8])
def test_first_seeing_frame_is_the_subsampling_window_rule(rate):
    window = receptive_window(rate)
    for frame in range(60):
        expected = next(t for t in range(60) if rate * t + window > frame)
        assert int(first_seeing_frame(torch.tensor(frame), rate, window)) == expected


def test_first_seeing_frame_matches_the_convolutions():
    """Encoder frame t's output changes when input frame f changes iff t is at or after the rule's frame."""
    torch.manual_seed(0)
    sub = Conv2dSubsampling(BINS, 16, rate=4, channels=4).double()
    x = torch.randn(1, 48, BINS, dtype=torch.float64)
    base = sub(x)
    for frame in (10, 17, 23, 30):
        bumped = x.clone()
        bumped[0, frame] += 1.0
        changed = (sub(bumped) - base).abs().amax(dim=-1)[0] > 0  # (T',)
        assert int(changed.nonzero()[0]) == int(first_seeing_frame(torch.tensor(frame), sub.rate, sub.window))


@pytest.mark.parametrize("rate", [4, 6])
def test_shifted_onsets_land_on_the_drawn_edge_frame(rate):
    window = receptive_window(rate)
    onsets = torch.arange(window, window + 40)
    for chunk, phase in itertools.product([1, 2, 5, 16, 25], [0, 3]):
        if phase >= chunk:
            continue
        for offset in range(1, min(4, chunk) + 1):
            offsets = torch.full_like(onsets, offset)
            shifts = edge_shifts(onsets, torch.ones_like(onsets, dtype=torch.bool), offsets, chunk, phase, rate, window)
            assert (shifts >= 0).all() and (shifts < rate * chunk).all()
            frames = first_seeing_frame(onsets + shifts, rate, window)
            assert ((frames + phase) % chunk == chunk - offset).all()
            # the shortest such shift: one frame less misses the target
            shorter = first_seeing_frame(onsets + shifts - 1, rate, window)
            assert ((shifts == 0) | ((shorter + phase) % chunk != chunk - offset)).all()


def test_unchosen_and_speech_first_utterances_are_untouched():
    feats, lens = batch([0, 3, 20, 20], [30, 30, 40, 40])
    chosen = torch.tensor([True, True, True, False])
    out, out_lens = place_onsets_at_chunk_edges(feats, lens, chosen, torch.tensor([1, 1, 1, 1]), 16, 0, 4, 7)
    shift = int(out_lens[2] - lens[2])
    assert out_lens.tolist()[:2] == [30, 30] and out_lens[3] == 40 and shift > 0
    for i in (0, 1, 3):
        assert torch.equal(out[i, : lens[i]], feats[i, : lens[i]])
        assert (out[i, lens[i]:] == 0).all()
    # the moved utterance: its first frame repeated, then the utterance unchanged, then zeros
    assert torch.equal(out[2, :shift], feats[2, :1].expand(shift, -1))
    assert torch.equal(out[2, shift: shift + 40], feats[2, :40])
    assert (out[2, shift + 40:] == 0).all()
    assert int(speech_onsets(out, out_lens)[2]) == 20 + shift


def test_no_shift_returns_the_batch_itself():
    feats, lens = batch([10], [30])
    out, out_lens = prepend_background(feats, lens, torch.zeros(1, dtype=torch.int64))
    assert out is feats and out_lens is lens


def test_edge_draws_are_deterministic_bounded_and_free_when_off():
    draws = []
    for _ in range(2):
        sampler = DynamicChunkSampler(seed=3, onset_edge_prob=0.5, onset_edge_frames=4)
        draws.append([sampler.onset_edges(200, chunk) for chunk in (16, 2)])
    for (c1, o1), (c2, o2) in zip(draws[0], draws[1]):
        assert torch.equal(c1, c2) and torch.equal(o1, o2)
    (chosen16, offsets16), (_, offsets2) = draws[0]
    assert 60 < int(chosen16.sum()) < 140
    assert set(offsets16.tolist()) == {1, 2, 3, 4} and set(offsets2.tolist()) == {1, 2}
    assert DynamicChunkSampler(onset_edge_prob=0.5).onset_edges(4, 0) is None  # full context: no grid
    off, plain = DynamicChunkSampler(seed=3), DynamicChunkSampler(seed=3)
    assert off.onset_edges(8, 16) is None
    assert [off.sample() for _ in range(20)] == [plain.sample() for _ in range(20)]


@pytest.mark.parametrize("kwargs", [{"onset_edge_prob": 1.5}, {"onset_edge_frames": 0}])
def test_bad_edge_settings_raise(kwargs):
    with pytest.raises(ValueError):
        DynamicChunkSampler(**kwargs)

