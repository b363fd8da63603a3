"""Lead-in probe (asr/ablation/lead_in.py): each row equals a stream built with the streaming API
(stream_step and the online CMN frontend), with the cache and the running mean as the row says."""

from __future__ import annotations

import pytest
import torch

from asr.ablation.lead_in import ROWS, lead_in_log_probs, lead_in_probe
from asr.ablation.translation import lead_in_features
from asr.evaluation.split import Utterance
from test_translation import model_for, tokenizer, utterances  # noqa: F401 - the module's fixture and builders

LEAD_FRAMES = 64  # encoder frames of the 256-frame lead-in at 4x subsampling


def _stream(model, frames: torch.Tensor, frontend=None) -> torch.Tensor:
    """(T'_i, V) log-probs of ``frames`` (T, F) streamed at C16/L4 in 50-frame pieces from a fresh encoder state;
    ``frontend``: an online CMN stream to normalize each piece with (None: the frames are normalized)."""
    state = model.encoder.init_state(1, 16, 4)
    pieces = []
    with torch.no_grad():
        for i in range(0, frames.size(0), 50):
            piece = frames[None, i : i + 50]
            piece = frontend.push(piece) if frontend is not None else piece
            pieces.append(model.encoder.stream_step(piece, state, final=i + 50 >= frames.size(0))[0])
    return model.ctc_log_probs(torch.cat(pieces, 1))[0]


def test_each_row_is_the_stream_it_describes(tokenizer):  # noqa: F811
    model = model_for(tokenizer, "rel_xl", online_cmn=100.0)
    feats, lead = utterances(), lead_in_features()
    rows = lead_in_log_probs(model, feats, lead)
    norm = model.encoder.online_cmn()
    for i, f in enumerate(feats):
        expected = {
            "fresh": _stream(model, f, norm.stream()),
            "lead-in": _stream(model, torch.cat([lead, f]), norm.stream())[LEAD_FRAMES:],
            # the running mean starts at the utterance; the lead-in gets the global mean alone (unchanged)
            "CMN restarted": _stream(model, torch.cat([lead, norm.stream().push(f)]))[LEAD_FRAMES:],
        }
        warm = norm.stream()
        warm.push(lead)  # the running mean has seen the lead-in; the encoder state is fresh
        expected["cache clear"] = _stream(model, f, warm)
        for row in ROWS:
            torch.testing.assert_close(rows[row][i], expected[row], rtol=1e-5, atol=1e-5, msg=f"{row}, utterance {i}")
    # The lead-in changes what the model reads (else the rows could not tell anything apart).
    assert float((rows["lead-in"][0] - rows["fresh"][0]).abs().max()) > 1e-3


def test_without_online_cmn_only_the_cache_carries_the_lead_in(tokenizer):  # noqa: F811
    model = model_for(tokenizer, "rel_xl")
    rows = lead_in_log_probs(model, utterances(2), lead_in_features())
    assert rows["CMN restarted"] is rows["lead-in"] and rows["cache clear"] is rows["fresh"]


def test_probe_scores_every_utterance_in_every_row(tokenizer):  # noqa: F811
    model = model_for(tokenizer, "rel_xl", online_cmn=100.0)
    utts = [Utterance(f"u{i}", "abc de", f, f.size(0) / 100) for i, f in enumerate(utterances())]
    results = lead_in_probe(model, tokenizer, utts, lead_in_features())
    assert list(results) == list(ROWS)
    for result in results.values():
        assert [r["key"] for r in result.records] == ["u0", "u1", "u2"] and result.totals["utterances"] == 3
    with pytest.raises(ValueError, match="no utterances"):
        lead_in_probe(model, tokenizer, [], lead_in_features())
