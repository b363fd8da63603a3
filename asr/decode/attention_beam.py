"""Beam search over the attention decoder (left-to-right), batched over the beam.

Each step feeds one token per beam to the decoder's incremental path
(``AsrModel.attention_step``, cached keys/values); the beam's cache rows are
reordered with the surviving hypotheses.

Axis legend: W beam width, U prefix length, T' encoder frames, D model dim, V vocab.

Length handling: a hypothesis ends when it emits <eos>; an ended hypothesis
stays in the beam with its score frozen (it can only be extended by <eos> at
log-probability 0), so ended and running hypotheses compete on equal terms.
At ``max_len`` tokens every running hypothesis is forced to end and pays
its own <eos> log-probability. There is no length normalisation, as in Wenet.

Early stop (exact): extending a hypothesis only adds log-probabilities <= 0, so
once the best ended hypothesis scores at least as well as every running one,
no running hypothesis can overtake it and the search stops. Without this, one
slow beam keeps all W beams running to max_len.
"""

from __future__ import annotations

import torch


@torch.no_grad()
def attention_beam_search(model, enc_out: torch.Tensor, enc_len, beam: int, max_len: int) -> list[int]:
    """Best hypothesis of a beam search over the decoder (``model.attention_step``).

    Args:
        model: an ``AsrModel`` with an attention decoder.
        enc_out: (1, T', D) encoder output of one utterance; enc_len: int or (1,) tensor.
        beam: W >= 1.
        max_len: most tokens in a hypothesis (eos excluded), >= 0.
    Returns:
        token ids without <sos>/<eos>; [] when enc_len is 0 (audio too short to
        give an encoder frame: there is nothing to attend to).
    """
    if beam < 1:
        raise ValueError(f"beam ({beam}) must be >= 1.")
    if max_len < 0:
        raise ValueError(f"max_len ({max_len}) must be >= 0.")
    if enc_out.dim() != 3 or enc_out.shape[0] != 1:
        raise ValueError(f"enc_out must be (1, T', D), got shape {tuple(enc_out.shape)}.")
    eos = model.sos_eos_id
    device = enc_out.device
    T_valid = int(enc_len)
    if T_valid == 0:
        return []
    state = model.init_attention_state(enc_out, T_valid)  # memory keys/values shared by the W rows
    hyps = torch.full((beam, 1), eos, dtype=torch.long, device=device)  # (W, 1): <sos>
    # Only row 0 is live at the start, so the first step does not pick W copies of one token.
    scores = torch.full((beam,), float("-inf"), dtype=torch.float64, device=device)
    scores[0] = 0.0
    ended = torch.zeros(beam, dtype=torch.bool, device=device)

    for step in range(max_len + 1):
        logp, state = model.attention_step(hyps[:, -1], state)  # (W, V)
        logp = logp.double()
        V = logp.shape[1]
        if step == max_len:
            forced = torch.full_like(logp, float("-inf"))
            forced[:, eos] = logp[:, eos]
            logp = forced
        logp[ended] = float("-inf")
        logp[ended, eos] = 0.0
        cand = scores[:, None] + logp  # (W, V)
        top_scores, flat = cand.view(-1).topk(beam)  # (W,)
        src, tok = flat // V, flat % V
        hyps = torch.cat([hyps[src], tok[:, None]], dim=1)  # (W, U+1)
        state = state.select(src)
        scores = top_scores
        ended = tok == eos
        if bool(ended.any()) and (bool(ended.all()) or scores[ended].max() >= scores[~ended].max()):
            break

    best = hyps[int(scores.argmax())].tolist()[1:]  # drop <sos>
    return best[: best.index(eos)] if eos in best else best
