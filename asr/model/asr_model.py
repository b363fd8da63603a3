"""CTC + attention hybrid ASR model (U2 / U2++): losses and the decoding entry points.

Axis legend: B batch, T input frames, T' encoder frames, D model dim, U tokens,
N hypotheses, V vocab.

The encoder is any module with the Encoder API (``forward(feats, lengths,
chunk_size, left_chunks) -> (out, out_lens)`` and ``output_size``); the model
never picks a chunk size itself.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from asr.model.ctc import ctc_loss, label_smoothing_loss
from asr.model.decoder import DecoderState, TransformerDecoder
from asr.model.encoder import build_encoder


def add_sos_eos(
    tokens: torch.Tensor, token_lens: torch.Tensor, sos_eos_id: int, ignore_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Decoder input and output for padded targets.

    Args:
        tokens: (B, U) padded with anything past token_lens.
        token_lens: (B,)
    Returns:
        ys_in (B, U+1): <sos> y_1..y_n, padded with <eos> (a valid id; masked as key).
        ys_out (B, U+1): y_1..y_n <eos>, padded with ignore_id.
    """
    B, U = tokens.shape
    pos = torch.arange(U + 1, device=tokens.device)[None, :]  # (1, U+1)
    lens = token_lens[:, None]
    body = F.pad(tokens, (1, 0), value=sos_eos_id)  # (B, U+1): <sos> y_1..y_U
    ys_in = torch.where(pos <= lens, body, torch.full_like(body, sos_eos_id))
    shifted = F.pad(tokens, (0, 1), value=ignore_id)  # (B, U+1): y_1..y_U pad
    ys_out = torch.where(pos < lens, shifted, torch.full_like(shifted, ignore_id))
    ys_out = torch.where(pos == lens, torch.full_like(ys_out, sos_eos_id), ys_out)
    return ys_in, ys_out


def reverse_padded(tokens: torch.Tensor, token_lens: torch.Tensor, pad_value: int) -> torch.Tensor:
    """Reverse the first token_lens[b] entries of every row; padding stays at the end.

    tokens (B, U) -> (B, U)
    """
    B, U = tokens.shape
    pos = torch.arange(U, device=tokens.device)[None, :]  # (1, U)
    src = (token_lens[:, None] - 1 - pos).clamp(min=0)  # (B, U)
    flipped = tokens.gather(1, src)
    return torch.where(pos < token_lens[:, None], flipped, torch.full_like(flipped, pad_value))


def _validate(vocab_size: int, sos_eos_id: int, blank_id: int, decoder_layers: int, r2l_decoder_layers: int,
              ctc_weight: float, reverse_weight: float, lsm_weight: float) -> None:
    if vocab_size < 3:
        raise ValueError(f"vocab_size ({vocab_size}) must be >= 3 (blank, <sos/eos> and a token).")
    if not 0 <= sos_eos_id < vocab_size:
        raise ValueError(f"sos_eos_id ({sos_eos_id}) must be in [0, {vocab_size}).")
    if not 0 <= blank_id < vocab_size or blank_id == sos_eos_id:
        raise ValueError(f"blank_id ({blank_id}) must be in [0, {vocab_size}) and differ from sos_eos_id ({sos_eos_id}).")
    if decoder_layers < 0 or r2l_decoder_layers < 0:
        raise ValueError(f"decoder_layers ({decoder_layers}) and r2l_decoder_layers ({r2l_decoder_layers}) must be >= 0.")
    if not 0.0 <= ctc_weight <= 1.0:
        raise ValueError(f"ctc_weight ({ctc_weight}) must be in [0, 1].")
    if ctc_weight < 1.0 and decoder_layers == 0:
        raise ValueError(f"ctc_weight ({ctc_weight}) < 1 needs an attention decoder, but decoder_layers is 0.")
    if not 0.0 <= reverse_weight <= 1.0:
        raise ValueError(f"reverse_weight ({reverse_weight}) must be in [0, 1].")
    if reverse_weight > 0.0 and (r2l_decoder_layers == 0 or decoder_layers == 0):
        raise ValueError(
            f"reverse_weight ({reverse_weight}) > 0 needs both decoders, got decoder_layers "
            f"({decoder_layers}) and r2l_decoder_layers ({r2l_decoder_layers})."
        )
    if not 0.0 <= lsm_weight < 1.0:
        raise ValueError(f"lsm_weight ({lsm_weight}) must be in [0, 1).")


class AsrModel(nn.Module):
    """Encoder + CTC head + attention decoder(s), trained with a hybrid loss.

    ``loss = ctc_weight * loss_ctc + (1 - ctc_weight) * loss_att`` where
    ``loss_att = (1 - reverse_weight) * l2r + reverse_weight * r2l`` (U2++).

    Args:
        encoder: module with the Encoder API; its ``output_size`` is the decoder width.
        vocab_size: V, from the tokenizer model.
        sos_eos_id: the single id used as <sos> and <eos>.
        blank_id: CTC blank.
        ignore_id: padding value of target tensors.
        decoder_layers: 0 only for pure CTC (ctc_weight == 1).
        r2l_decoder_layers: > 0 builds the right-to-left decoder (U2++).
        decoder_heads, decoder_ffn_dim, decoder_dropout: decoder shape.
        ctc_weight, reverse_weight: loss mixing weights in [0, 1].
        lsm_weight: label smoothing of the attention loss, in [0, 1).
    """

    def __init__(
        self,
        encoder: nn.Module,
        vocab_size: int,
        sos_eos_id: int,
        blank_id: int = 0,
        ignore_id: int = -1,
        decoder_layers: int = 3,
        r2l_decoder_layers: int = 0,
        decoder_heads: int = 4,
        decoder_ffn_dim: int = 1024,
        decoder_dropout: float = 0.1,
        ctc_weight: float = 0.3,
        reverse_weight: float = 0.0,
        lsm_weight: float = 0.1,
    ) -> None:
        super().__init__()
        _validate(vocab_size, sos_eos_id, blank_id, decoder_layers, r2l_decoder_layers, ctc_weight,
                  reverse_weight, lsm_weight)
        self.encoder = encoder
        self.vocab_size = vocab_size
        self.sos_eos_id = sos_eos_id
        self.blank_id = blank_id
        self.ignore_id = ignore_id
        self.ctc_weight = ctc_weight
        self.reverse_weight = reverse_weight
        self.lsm_weight = lsm_weight
        d_model = int(encoder.output_size)
        # The CTC head always exists: CTC prefix beam and rescoring need it even when ctc_weight is 0.
        self.ctc_proj = nn.Linear(d_model, vocab_size)

        def make(layers: int) -> TransformerDecoder | None:
            if layers == 0:
                return None
            return TransformerDecoder(vocab_size, d_model, decoder_heads, decoder_ffn_dim, layers, decoder_dropout)

        self.decoder = make(decoder_layers)
        self.r2l_decoder = make(r2l_decoder_layers)

    # ------------------------------------------------------------------ training
    def forward(
        self,
        feats: torch.Tensor,
        feat_lens: torch.Tensor,
        tokens: torch.Tensor,
        token_lens: torch.Tensor,
        chunk_size: int = 0,
        left_chunks: int = -1,
        chunk_phase: int = 0,
    ) -> dict[str, torch.Tensor]:
        """Hybrid loss of a batch.

        Args:
            feats: (B, T, F) zero-padded features; feat_lens (B,).
            tokens: (B, U) padded with ignore_id; token_lens (B,).
            chunk_size, left_chunks, chunk_phase: the encoder's attention chunking (``ConformerEncoder.forward``).
        Returns:
            dict with ``loss`` and ``loss_ctc`` always, ``loss_att`` when a decoder
            exists, ``loss_r2l`` when the right-to-left decoder exists (all scalars).
        """
        enc_out, enc_lens = self.encode(feats, feat_lens, chunk_size, left_chunks, chunk_phase)
        out: dict[str, torch.Tensor] = {}
        out["loss_ctc"] = ctc_loss(self.ctc_log_probs(enc_out), enc_lens, tokens, token_lens, self.blank_id)
        if self.decoder is not None:
            loss_att = self._attention_loss(self.decoder, enc_out, enc_lens, tokens, token_lens)
            if self.r2l_decoder is not None:
                reversed_tokens = reverse_padded(tokens, token_lens, self.ignore_id)
                out["loss_r2l"] = self._attention_loss(self.r2l_decoder, enc_out, enc_lens, reversed_tokens, token_lens)
                loss_att = (1.0 - self.reverse_weight) * loss_att + self.reverse_weight * out["loss_r2l"]
            out["loss_att"] = loss_att
            out["loss"] = self.ctc_weight * out["loss_ctc"] + (1.0 - self.ctc_weight) * loss_att
        else:
            out["loss"] = out["loss_ctc"]
        return out

    def _attention_loss(self, decoder, enc_out, enc_lens, tokens, token_lens) -> torch.Tensor:
        ys_in, ys_out = add_sos_eos(tokens, token_lens, self.sos_eos_id, self.ignore_id)  # (B, U+1) each
        logits = decoder(enc_out, enc_lens, ys_in, token_lens + 1)  # (B, U+1, V)
        return label_smoothing_loss(logits, ys_out, self.lsm_weight, self.ignore_id)

    # ------------------------------------------------------------------ decoding
    def encode(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, chunk_size: int = 0, left_chunks: int = -1,
        chunk_phase: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """feats (B, T, F), feat_lens (B,) -> enc_out (B, T', D), enc_lens (B,)."""
        return self.encoder(feats, feat_lens, chunk_size=chunk_size, left_chunks=left_chunks, chunk_phase=chunk_phase)

    def ctc_log_probs(self, enc_out: torch.Tensor) -> torch.Tensor:
        """enc_out (B, T', D) -> (B, T', V) CTC log-probabilities (float32 at least)."""
        return F.log_softmax(self.ctc_proj(enc_out).float(), dim=-1)

    def _require_decoder(self) -> TransformerDecoder:
        if self.decoder is None:
            raise ValueError("this model has no attention decoder (decoder_layers=0); use a CTC decoding mode.")
        return self.decoder

    def attention_log_probs(
        self, enc_out: torch.Tensor, enc_lens: torch.Tensor, prefixes: torch.Tensor
    ) -> torch.Tensor:
        """Next-token log-probabilities after each prefix (left-to-right decoder).

        Args:
            enc_out: (N, T', D), row n aligned with prefixes[n]; enc_lens (N,).
            prefixes: (N, U) ids starting with <sos>, all of length U.
        Returns:
            (N, V)
        """
        logits = self._require_decoder()(enc_out, enc_lens, prefixes)  # (N, U, V)
        return F.log_softmax(logits[:, -1].float(), dim=-1)

    def init_attention_state(self, enc_out: torch.Tensor, enc_len) -> DecoderState:
        """Incremental left-to-right decoding state over one utterance: enc_out (1, T', D), enc_len int."""
        T_valid = int(enc_len)
        lens = torch.tensor([T_valid], dtype=torch.long, device=enc_out.device)
        return self._require_decoder().init_state(enc_out[:, :T_valid], lens)

    def attention_step(self, tokens: torch.Tensor, state: DecoderState) -> tuple[torch.Tensor, DecoderState]:
        """Feed tokens (N,) (<sos> first); returns next-token log-probs (N, V) and the new state.

        Same numbers as ``attention_log_probs`` on the whole prefixes, at O(U) per step.
        """
        logits, state = self._require_decoder().step(tokens, state)
        return F.log_softmax(logits.float(), dim=-1), state

    def score_hypotheses(
        self, enc_out: torch.Tensor, enc_len, hyps: list[list[int]], reverse_weight: float = 0.0
    ) -> torch.Tensor:
        """Attention log-likelihood of each hypothesis, <eos> included.

        Args:
            enc_out: (1, T', D); enc_len: int or (1,) tensor.
            hyps: N token lists (no <sos>/<eos>; may be empty).
            reverse_weight: weight of the right-to-left score (needs the r2l decoder).
        Returns:
            (N,) ``(1 - w) * log p_l2r(y, eos) + w * log p_r2l(reverse(y), eos)``.
        """
        decoder = self._require_decoder()
        if reverse_weight > 0.0 and self.r2l_decoder is None:
            raise ValueError(f"reverse_weight ({reverse_weight}) > 0 but the model has no r2l decoder.")
        N = len(hyps)
        device = enc_out.device
        if N == 0:
            return torch.zeros(0, device=device)
        T_valid = int(enc_len)
        # One memory for every hypothesis: the decoders project its keys and values once, not N times
        # (N copies of a long utterance's encoder output would dominate the memory of rescoring).
        memory = enc_out[:, :T_valid]  # (1, T', D)
        memory_lens = torch.full((1,), T_valid, dtype=torch.long, device=device)
        lens = torch.tensor([len(h) for h in hyps], dtype=torch.long, device=device)
        U = max(int(lens.max()), 1)
        tokens = torch.full((N, U), self.ignore_id, dtype=torch.long, device=device)
        for n, h in enumerate(hyps):
            tokens[n, : len(h)] = torch.tensor(h, dtype=torch.long, device=device)

        def loglik(dec: TransformerDecoder, ys: torch.Tensor) -> torch.Tensor:
            ys_in, ys_out = add_sos_eos(ys, lens, self.sos_eos_id, self.ignore_id)  # (N, U+1)
            logp = F.log_softmax(dec(memory, memory_lens, ys_in, lens + 1).float(), dim=-1)  # (N, U+1, V)
            valid = ys_out != self.ignore_id
            picked = logp.gather(-1, ys_out.clamp(min=0)[..., None]).squeeze(-1)  # (N, U+1)
            return (picked * valid).sum(-1)

        score = loglik(decoder, tokens)
        if reverse_weight > 0.0:
            r2l = loglik(self.r2l_decoder, reverse_padded(tokens, lens, self.ignore_id))
            score = (1.0 - reverse_weight) * score + reverse_weight * r2l
        return score


def build_asr_model(*, vocab_size: int, sos_eos_id: int, encoder_kwargs: dict, **model_kwargs) -> AsrModel:
    """Build the encoder with ``asr.model.build_encoder(**encoder_kwargs)`` and wrap it."""
    return AsrModel(build_encoder(**encoder_kwargs), vocab_size=vocab_size, sos_eos_id=sos_eos_id, **model_kwargs)
