"""Position scheme construction, validation and the input-side (absolute) terms."""

import math

import pytest
import torch

from asr.model.positions import POSITION_SCHEMES, build_position_scheme, scheme_options
from asr.model.sinusoid import absolute_sinusoids, sinusoid_table

D, H = 16, 4


def explicit_sinusoid(position: float, dim: int) -> torch.Tensor:
    """Vaswani et al. written out channel by channel: (dim,) float64."""
    row = []
    for ch in range(dim):
        freq = 10000.0 ** (-(2 * (ch // 2)) / dim)
        row.append(math.sin(position * freq) if ch % 2 == 0 else math.cos(position * freq))
    return torch.tensor(row, dtype=torch.float64)


def test_unknown_scheme_lists_valid_names():
    with pytest.raises(ValueError) as err:
        build_position_scheme("relxl", D, H)
    for name in POSITION_SCHEMES:
        assert name in str(err.value)


@pytest.mark.parametrize(
    "name, option", [("shaw", "max_len"), ("rel_xl", "max_distance"), ("abs_learned", "base"), ("none", "x")]
)
def test_unknown_option_names_scheme_and_option(name, option):
    with pytest.raises(ValueError) as err:
        build_position_scheme(name, D, H, **{option: 3})
    assert name in str(err.value) and option in str(err.value)


def test_options_are_accepted_and_listed():
    assert scheme_options("shaw") == ("max_distance",)
    assert scheme_options("rel_bias") == ("max_distance",)
    assert scheme_options("abs_learned") == ("max_len",)
    assert scheme_options("rope") == ("base",)
    assert scheme_options("rel_xl") == ()
    assert build_position_scheme("shaw", D, H, max_distance=3).max_distance == 3
    assert build_position_scheme("abs_learned", D, H, max_len=7).max_len == 7
    assert build_position_scheme("rope", D, H, base=500.0).base == 500.0


@pytest.mark.parametrize("d_model, heads", [(15, 4), (0, 1), (16, 0)])
def test_bad_dims_raise_with_values(d_model, heads):
    with pytest.raises(ValueError, match=str(d_model)):
        build_position_scheme("rel_xl", d_model, heads)


def test_rope_needs_even_head_dim():
    with pytest.raises(ValueError, match="even"):
        build_position_scheme("rope", 12, 4)  # head dim 3


def test_is_relative_flags():
    relative = {n for n in POSITION_SCHEMES if build_position_scheme(n, D, H).is_relative}
    assert relative == {"rel_xl", "shaw", "rel_bias", "rope"}


@pytest.mark.parametrize("name", ["rel_xl", "shaw", "rel_bias", "rope", "none"])
def test_schemes_without_input_term_return_x(name):
    x = torch.randn(2, 5, D)
    assert torch.equal(build_position_scheme(name, D, H).embed_input(x, 7), x)


def test_sinusoid_table_matches_formula_including_negative_and_odd_dim():
    positions = torch.tensor([-7.0, 0.0, 3.0, 1234.0], dtype=torch.float64)
    for dim in (6, 7):
        table = sinusoid_table(positions, dim)
        expected = torch.stack([explicit_sinusoid(p.item(), dim) for p in positions])
        torch.testing.assert_close(table, expected, rtol=0, atol=1e-12)


def test_absolute_sinusoids_keep_float64_angles_for_a_float32_caller():
    """At position 10^6 float32 angles are off by ~0.03 rad; float64 angles cast once are not."""
    like = torch.zeros(1, dtype=torch.float32)
    rows = absolute_sinusoids(10**6 - 1, 2, 8, like)
    expected = torch.stack([explicit_sinusoid(10.0**6 - 1 + t, 8) for t in range(2)])
    assert rows.dtype == torch.float32
    torch.testing.assert_close(rows.double(), expected, rtol=0, atol=1e-6)


def test_abs_sin_adds_table_at_absolute_time():
    scheme = build_position_scheme("abs_sin", D, H)
    x = torch.randn(2, 4, D, dtype=torch.float64)
    out = scheme.embed_input(x, 10)
    expected = x + torch.stack([explicit_sinusoid(10.0 + t, D) for t in range(4)])
    torch.testing.assert_close(out, expected)
    # Streaming pieces see the same positions as one offline call.
    whole = scheme.embed_input(torch.zeros(1, 9, D), 0)
    piece = scheme.embed_input(torch.zeros(1, 3, D), 6)
    torch.testing.assert_close(piece, whole[:, 6:])


def test_abs_learned_uses_rows_at_absolute_time_and_names_limit():
    scheme = build_position_scheme("abs_learned", D, H, max_len=12)
    x = torch.zeros(1, 4, D)
    torch.testing.assert_close(scheme.embed_input(x, 8)[0], scheme.table.weight[8:12])
    with pytest.raises(ValueError, match="max_len=12"):
        scheme.embed_input(x, 9)  # needs times 9..12
    with pytest.raises(ValueError, match="start_time"):
        scheme.embed_input(x, -1)


def test_scorers_have_their_own_parameters_per_layer():
    for name in ("rel_xl", "shaw", "rel_bias"):
        scheme = build_position_scheme(name, D, H)
        a, b = scheme.make_scorer(H, D // H, 0.0), scheme.make_scorer(H, D // H, 0.0)
        pa, pb = list(a.parameters()), list(b.parameters())
        assert pa and len(pa) == len(pb)
        assert all(x is not y for x, y in zip(pa, pb))
