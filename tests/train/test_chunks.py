import pytest
import torch

from asr.train.chunks import DynamicChunkSampler


def test_draws_respect_ranges_and_probabilities():
    sampler = DynamicChunkSampler(p_full=0.3, max_chunk=5, max_left=2, p_unlimited_left=0.5, seed=1)
    draws = [sampler.sample() for _ in range(2000)]
    full = [d for d in draws if d == (0, -1)]
    chunked = [d for d in draws if d[0] > 0]
    assert len(full) + len(chunked) == len(draws)
    assert 0.25 < len(full) / len(draws) < 0.35
    assert {c for c, _ in chunked} == {1, 2, 3, 4, 5}
    assert {left for _, left in chunked} == {-1, 0, 1, 2}


def test_private_generator_is_deterministic_and_leaves_global_rng_alone():
    torch.manual_seed(0)
    expected_global = torch.rand(3)
    torch.manual_seed(0)
    a = [DynamicChunkSampler(seed=7).sample() for _ in range(1)]
    seq_a = DynamicChunkSampler(seed=7)
    seq_b = DynamicChunkSampler(seed=7)
    assert [seq_a.sample() for _ in range(50)] == [seq_b.sample() for _ in range(50)]
    assert a
    assert torch.equal(torch.rand(3), expected_global)


def test_state_dict_resumes_the_sequence():
    s = DynamicChunkSampler(seed=3)
    for _ in range(10):
        s.sample()
    state = s.state_dict()
    tail = [s.sample() for _ in range(20)]
    fresh = DynamicChunkSampler(seed=99)
    fresh.load_state_dict(state)
    assert [fresh.sample() for _ in range(20)] == tail


@pytest.mark.parametrize("kwargs", [{"p_full": 1.5}, {"max_chunk": 0}, {"max_left": -1}, {"min_chunk": 0},
                                    {"min_chunk": 6, "max_chunk": 5}])
def test_bad_arguments_raise(kwargs):
    with pytest.raises(ValueError):
        DynamicChunkSampler(**kwargs)


def test_random_phase_spans_the_chunk_and_costs_no_draw_when_off():
    on = DynamicChunkSampler(seed=5, random_phase=True)
    phases = {}
    for _ in range(400):
        chunk, _ = on.sample()
        phase = on.phase(chunk)
        assert 0 <= phase < max(chunk, 1) and (chunk > 0 or phase == 0)
        phases.setdefault(chunk, set()).add(phase)
    assert phases[25] and len(set().union(*(p for c, p in phases.items() if c >= 4))) > 10
    # off: the phase is 0 and the chunk sequence is the one a sampler without phases draws
    off, plain = DynamicChunkSampler(seed=5), DynamicChunkSampler(seed=5)
    drawn = []
    for _ in range(50):
        chunk, left = off.sample()
        assert off.phase(chunk) == 0
        drawn.append((chunk, left))
    assert drawn == [plain.sample() for _ in range(50)]


def test_min_chunk_bounds_the_draws_and_keeps_the_default_sequence():
    low = DynamicChunkSampler(p_full=0.0, max_chunk=9, seed=3, min_chunk=4)
    chunks = {low.sample()[0] for _ in range(300)}
    assert chunks == set(range(4, 10))
    # min_chunk=1 is the sampler as it was: the same draws, the same sequence
    default, explicit = DynamicChunkSampler(seed=4), DynamicChunkSampler(seed=4, min_chunk=1)
    assert [default.sample() for _ in range(50)] == [explicit.sample() for _ in range(50)]
