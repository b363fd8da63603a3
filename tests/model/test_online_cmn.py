"""OnlineCmn: the running mean of a float64 reference, streamed == whole, padding-proof in forward()."""

import pytest
import torch

from asr.model import build_encoder
from asr.model import normalization
from asr.model.normalization import OnlineCmn, SpeechGate


def reference(feats, mean, prior):
    """Frame by frame in float64, straight from the formula."""
    out, total = [], torch.zeros_like(mean, dtype=torch.float64)
    for t, frame in enumerate(feats.double()):
        total = total + frame
        running = (prior * mean.double() + total) / (prior + t + 1)
        out.append(frame - running + mean.double())
    return torch.stack(out)


@pytest.mark.parametrize("prior", [0.5, 30.0, 1000.0])
def test_matches_the_float64_reference_and_streams_exactly(prior):
    g = torch.Generator().manual_seed(int(prior))
    mean = 10 + 3 * torch.randn(16, generator=g)
    feats = 8 + 2 * torch.randn(300, 16, generator=g)
    norm = OnlineCmn(mean, prior)
    whole = norm(feats)
    assert whole.dtype == torch.float32
    assert torch.allclose(whole.double(), reference(feats, mean, prior), atol=1e-5)
    stream = norm.stream()
    cuts = [0, 1, 1, 40, 41, 299, 300]
    streamed = torch.cat([stream.push(feats[a:b]) for a, b in zip(cuts, cuts[1:])])
    assert torch.allclose(streamed, whole, atol=1e-6)
    stream.reset()
    assert torch.allclose(stream.push(feats[:10]), whole[:10], atol=1e-6)
    # a constant offset on every frame (another channel's gain) is gone once the prior is outweighed
    shifted = norm(feats + 4.0)
    assert (shifted[-50:] - whole[-50:]).abs().max() < 4.0 * (prior + 1) / (prior + 250) + 1e-4


def test_batch_rows_are_independent_and_padding_never_reaches_earlier_frames():
    g = torch.Generator().manual_seed(1)
    mean = torch.randn(8, generator=g)
    norm = OnlineCmn(mean, 20.0)
    a, b = torch.randn(50, 8, generator=g), torch.randn(30, 8, generator=g)
    batch = torch.zeros(2, 50, 8)
    batch[0], batch[1, :30] = a, b
    out = norm(batch)
    assert torch.allclose(out[0], norm(a), atol=1e-6) and torch.allclose(out[1, :30], norm(b), atol=1e-6)


def test_encoder_forward_applies_it_and_a_padded_row_encodes_as_alone():
    torch.manual_seed(0)
    enc = build_encoder(pos_enc="rel_xl", input_dim=16, d_model=32, num_heads=2, num_layers=1, ffn_dim=32,
                        conv_kernel=3, causal=True, subsampling=4, dropout=0.0, online_cmn_frames=25.0).eval()
    enc.set_cmvn(torch.full((16,), 3.0), torch.full((16,), 0.5))
    assert isinstance(enc.online_cmn(), OnlineCmn) and enc.online_cmn().prior_frames == 25.0
    g = torch.Generator().manual_seed(2)
    long, short = 3 + torch.randn(1, 80, 16, generator=g), 3 + torch.randn(1, 48, 16, generator=g)
    batch = torch.zeros(2, 80, 16)
    batch[0], batch[1, :48] = long[0], short[0]
    with torch.no_grad():
        out, lens = enc(batch, torch.tensor([80, 48]))
        alone, alone_lens = enc(short, torch.tensor([48]))
    # full context: frames past a row's length are masked, so its valid frames match exactly
    assert torch.allclose(out[1, : int(alone_lens[0])], alone[0], atol=1e-5)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="prior_frames"):
        OnlineCmn(torch.zeros(4), 0.0)
    with pytest.raises(ValueError, match=r"\(F,\)"):
        OnlineCmn(torch.zeros(2, 4), 10.0)
    with pytest.raises(ValueError, match="bins"):
        OnlineCmn(torch.zeros(4), 10.0)(torch.zeros(3, 5))
    with pytest.raises(ValueError, match="online_cmn_frames"):
        build_encoder(pos_enc="rel_xl", input_dim=8, d_model=16, num_heads=2, num_layers=1, ffn_dim=16,
                      online_cmn_frames=-1.0)
    off = build_encoder(pos_enc="rel_xl", input_dim=8, d_model=16, num_heads=2, num_layers=1, ffn_dim=16)
    assert off.online_cmn() is None


def gated_reference(feats, mean, prior, gate):
    """The speech-gated running mean frame by frame in float64, straight from SpeechGate's formulas
    (the noise tracker's too when ``gate.noise_snr_db`` > 0)."""
    mean = mean.double()
    global_level = float(mean.mean())
    level, noise_floor, total, count, out = global_level, float("inf"), torch.zeros_like(mean), 0.0, []
    for frame in feats.double():
        energy = float(frame.mean())
        level = max(level - gate.decay, energy)
        noise_floor = min(noise_floor + gate.noise_rise, energy)
        counts = energy >= level - gate.margin and energy >= global_level - gate.floor
        if gate.noise_snr_db > 0:
            counts = counts and energy >= noise_floor + gate.noise_snr
        if counts:
            total, count = total + frame, count + 1
        out.append(frame - (prior * mean + total) / (prior + count) + mean)
    return torch.stack(out)


def session_frames(g, bins=16, speech_level=10.0):
    """Silence, speech, a pause, speech, at levels the gate must tell apart: (T, F)."""
    speech = lambda n: speech_level + 2 * torch.randn(n, bins, generator=g)  # noqa: E731
    quiet = lambda n: speech_level - 8 + 0.5 * torch.randn(n, bins, generator=g)  # noqa: E731  ~35 dB down
    return torch.cat([quiet(150), speech(120), quiet(90), speech(80), torch.full((20, bins), -15.9)])


@pytest.mark.parametrize("margin_db,noise_snr_db", [(10.0, 0.0), (20.0, 0.0), (40.0, 0.0), (15.0, 6.0), (20.0, 2.0)])
def test_gated_matches_the_float64_reference_and_streams_exactly(margin_db, noise_snr_db):
    g = torch.Generator().manual_seed(int(margin_db))
    mean = 10 + 0.5 * torch.randn(16, generator=g)
    feats = session_frames(g)
    gate = SpeechGate(margin_db=margin_db, noise_snr_db=noise_snr_db)
    norm = OnlineCmn(mean, 50.0, gate)
    whole = norm(feats)
    assert torch.allclose(whole.double(), gated_reference(feats, mean, 50.0, gate), atol=1e-5)
    stream = norm.stream()
    cuts = [0, 1, 7, 150, 151, 300, 420, feats.size(0)]
    streamed = torch.cat([stream.push(feats[a:b]) for a, b in zip(cuts, cuts[1:])])
    assert torch.allclose(streamed, whole, atol=1e-6)
    batch = torch.zeros(2, feats.size(0) + 5, 16)
    batch[0, : feats.size(0)], batch[1, :100] = feats, feats[:100]
    out = norm(batch)
    assert torch.allclose(out[0, : feats.size(0)], whole, atol=1e-6)
    assert torch.allclose(out[1, :100], whole[:100], atol=1e-6)


def test_gate_leaves_speech_only_input_unchanged_and_ignores_silence():
    g = torch.Generator().manual_seed(3)
    mean = 10 + 0.5 * torch.randn(16, generator=g)
    speech = 10 + 2 * torch.randn(300, 16, generator=g)
    plain, gated = OnlineCmn(mean, 50.0), OnlineCmn(mean, 50.0, SpeechGate())
    assert torch.equal(gated(speech), plain(speech))  # every speech frame counts: the same numbers
    # the same speech after 2 s of a hum 35 dB down: ungated, the lead-in drags the mean; gated, it does not
    hum = 10 - 8 + 0.2 * torch.randn(200, 16, generator=g)
    after_plain = plain(torch.cat([hum, speech]))[200:]
    after_gated = gated(torch.cat([hum, speech]))[200:]
    assert (after_gated - gated(speech)).abs().max() < 1e-5
    assert (after_plain - plain(speech)).abs().max() > 1.0
    # digital silence (log of float eps) never counts, whatever the tracker did
    zeros = torch.full((500, 16), -15.9)
    assert torch.allclose(gated(torch.cat([zeros, speech]))[500:], gated(speech), atol=1e-5)


def loud_floor_then_speech(g, bins=16, floor_frames=256):
    """A stationary floor about 4 dB under the global mean's level (as white noise at -50 dBFS reads
    in sherpa-onnx's fbank), then speech: syllables at the global level and above, closures 20 dB down."""
    floor = 10 - 0.9 + 0.3 * torch.randn(floor_frames, bins, generator=g)
    syllables = [torch.cat([10.5 + 2 * torch.randn(18, bins, generator=g), 5.4 + 0.5 * torch.randn(7, bins, generator=g)])
                 for _ in range(12)]
    return floor, torch.cat(syllables)


def test_noise_tracker_keeps_a_loud_stationary_floor_out_and_counts_speech():
    g = torch.Generator().manual_seed(5)
    mean = 10 + 0.5 * torch.randn(16, generator=g)
    floor, speech = loud_floor_then_speech(g)
    gate, tracked = OnlineCmn(mean, 50.0, SpeechGate(margin_db=15.0)), OnlineCmn(
        mean, 50.0, SpeechGate(margin_db=15.0, noise_snr_db=6.0))
    # the floor passes the level gate (it reads at speech level) but not the tracker
    assert float(gate.apply(floor)[1].count) == floor.size(0)
    assert float(tracked.apply(floor)[1].count) == 0
    # so the speech after it is normalized almost as if the stream had started with it, and far
    # closer than with the level gate alone
    fresh = tracked(speech)
    after_tracked = tracked(torch.cat([floor, speech]))[floor.size(0):]
    after_gate = gate(torch.cat([floor, speech]))[floor.size(0):]
    assert (after_tracked - fresh).abs().mean() < 0.1 * (after_gate - gate(speech)).abs().mean()
    # on speech alone it counts every syllable frame once a closure has shown where the floor is, and
    # no closure frame: the first syllable, with nothing quieter before it, could be a floor
    _, after = tracked.running(speech.double(), tracked.initial_state())
    counted = torch.diff(after.count, prepend=torch.zeros(1, dtype=torch.float64)).bool()
    syllable = torch.tensor(([True] * 18 + [False] * 7) * 12)
    assert torch.equal(counted, syllable & (torch.arange(speech.size(0)) >= 25))


def test_noise_tracker_state_starts_at_zero_and_the_first_frame_sets_the_floor():
    mean = torch.full((4,), 2.0)
    norm = OnlineCmn(mean, 10.0, SpeechGate(margin_db=15.0, noise_snr_db=6.0))
    state = norm.initial_state()
    assert float(state.noise) == 0.0  # a new stream's state is all zeros (sherpa-onnx makes it so)
    _, after = norm.apply(torch.full((1, 4), 1.5), state)
    assert float(after.noise) == pytest.approx(normalization.NOISE_CEILING - (1.5 - 2.0))
    assert float(after.count) == 0  # a frame is never SNR above itself


def test_encoder_builds_the_gate_and_refuses_a_negative_margin():
    kwargs = dict(pos_enc="rel_xl", input_dim=8, d_model=16, num_heads=2, num_layers=1, ffn_dim=16,
                  online_cmn_frames=10.0)
    assert build_encoder(**kwargs).online_cmn().gate is None
    assert build_encoder(**kwargs, online_cmn_gate_db=25.0).online_cmn().gate == SpeechGate(margin_db=25.0)
    with pytest.raises(ValueError, match="online_cmn_gate_db"):
        build_encoder(**kwargs, online_cmn_gate_db=-1.0)
    with pytest.raises(ValueError, match="margin_db"):
        SpeechGate(margin_db=0.0)
    tracked = build_encoder(**kwargs, online_cmn_gate_db=15.0, online_cmn_noise_snr_db=6.0).online_cmn().gate
    assert tracked == SpeechGate(margin_db=15.0, noise_snr_db=6.0)
    with pytest.raises(ValueError, match="needs the speech gate"):
        build_encoder(**kwargs, online_cmn_noise_snr_db=6.0)
    with pytest.raises(ValueError, match="online_cmn_noise_snr_db"):
        build_encoder(**kwargs, online_cmn_gate_db=15.0, online_cmn_noise_snr_db=-1.0)
    with pytest.raises(ValueError, match="noise_rise_db_per_s"):
        SpeechGate(noise_rise_db_per_s=0.0)


def test_running_max_traced_form_equals_cummax(monkeypatch):
    values = torch.randn(3, 37, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    eager = normalization.running_max(values)
    assert torch.equal(eager, torch.cummax(values, -1).values)
    monkeypatch.setattr(normalization, "tracing", lambda: True)
    assert torch.equal(normalization.running_max(values), eager)
