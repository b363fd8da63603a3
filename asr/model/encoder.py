"""Conformer encoder: offline/chunk-masked ``forward`` and exact chunk streaming.

Axis letters: B batch, T feature frames, F feature bins, T' encoder frames,
D model dim, C chunk size (encoder frames), M cached frames.

Pipeline (both paths): global CMVN -> Conv2d subsampling -> xscale sqrt(D)
-> ``scheme.embed_input(x, start_time)`` -> dropout -> Conformer blocks -> LayerNorm.
With ``online_cmn_frames > 0``, ``forward`` first swaps each frame's global mean for its
utterance's running mean (``asr.model.normalization.OnlineCmn``); streams get that from
their frontend (``online_cmn()``), frame by frame, because the serving paths feed
overlapping feature spans that an in-encoder running sum would count twice.

``stream_step`` reproduces ``forward(feats, lengths, chunk_size=C, left_chunks=L)``
exactly: chunks are aligned at encoder time 0, each layer caches the K/V of the
last L*C frames (what the chunk mask lets a query see) and the causal conv module
caches its last kernel-1 inputs (the conv sees across chunk borders offline too).

With ``chunk_lookahead`` r > 0, each chunk is also encoded with the first r frames of the next
one (every layer's queries and keys are the chunk plus those frames; their outputs are dropped
and their K/V and conv inputs are not cached, so the next chunk encodes them again as its own).
A chunk's first frames then hear what follows them, which a word's onset at a chunk's end needs;
a stream waits r frames longer for each chunk. No mask expresses the re-encoded frames: the
chunked ``forward`` of such an encoder runs every chunk's window of a layer at once
(``asr.model.lookahead``), which equals the loop over chunks with the caches a stream keeps
(``_forward_chunks``, the reference), and streaming equals both exactly.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from asr.model.conformer import ConformerBlock
from asr.model.lookahead import forward_windows
from asr.model.masks import ChunkMask, check_chunk_args, check_chunk_phase, padding_mask
from asr.model.normalization import OnlineCmn, SpeechGate
from asr.model.positions import build_position_scheme
from asr.model.scorers.blocked import use_blocked
from asr.model.subsampling import Conv2dSubsampling
from asr.model.tracing import tracing
from asr.streaming.state import LayerCache, StreamState


# Encoder frames per subsampling piece of a long input (see ConformerEncoder._embed).
EMBED_PIECE = 1024


class ConformerEncoder(nn.Module):
    """Conformer encoder with one position scheme shared by all layers.

    Args:
        pos_enc: position scheme name, one of ``POSITION_SCHEMES``.
        input_dim: F.
        d_model: D.
        num_heads: H (divides D; checked by the position scheme).
        num_layers: number of Conformer blocks.
        ffn_dim: feed-forward hidden size.
        conv_kernel: depthwise kernel of the conv module.
        causal: causal conv module; streaming needs it.
        subsampling: 4, 6 or 8.
        subsampling_channels: conv width of the subsampling front end (None: D).
        dropout: dropout after the input embedding and inside the blocks.
        xscale: multiply the subsampled frames by sqrt(D) (same for every scheme).
        online_cmn_frames: > 0: normalize each utterance by its running mean, the global mean
            counting as this many frames (see :class:`OnlineCmn`); 0: global CMVN alone.
        online_cmn_gate_db: > 0: the running mean learns only from frames within this many dB of
            the tracked speech level (:class:`SpeechGate`), so silence, hum and pauses do not move
            it; 0: from every frame.
        online_cmn_noise_snr_db: > 0 (with the gate): frames less than this many dB above the
            tracked noise floor do not count either (``SpeechGate.noise_snr_db``), which keeps a
            loud stationary floor out; 0: no noise tracker.
        conv_norm: the conv module's norm, ``layer_norm`` or ``none`` (see
            :class:`~asr.model.conformer.ConvModule`).
        conv_causal_pad: where a causal conv module's left context lives, ``depthwise``
            or ``input`` (Wenet's); see :class:`~asr.model.conformer.ConvModule`.
        chunk_lookahead: r >= 0 encoder frames past its end that a chunk also sees, whenever the
            encoder runs in chunks (training, chunked decoding, streams); 0: none. Costs r frames
            of latency.
        **scheme_options: passed to ``build_position_scheme`` (e.g. max_distance, max_len).
    """

    def __init__(
        self,
        pos_enc: str = "rel_xl",
        input_dim: int = 80,
        d_model: int = 144,
        num_heads: int = 4,
        num_layers: int = 2,
        ffn_dim: int = 576,
        conv_kernel: int = 15,
        causal: bool = True,
        subsampling: int = 4,
        subsampling_channels: int | None = None,
        dropout: float = 0.0,
        xscale: bool = True,
        online_cmn_frames: float = 0.0,
        online_cmn_gate_db: float = 0.0,
        online_cmn_noise_snr_db: float = 0.0,
        conv_norm: str = "layer_norm",
        conv_causal_pad: str = "depthwise",
        chunk_lookahead: int = 0,
        **scheme_options,
    ) -> None:
        super().__init__()
        if input_dim < 1 or d_model < 1 or ffn_dim < 1:
            raise ValueError(f"input_dim ({input_dim}), d_model ({d_model}) and ffn_dim ({ffn_dim}) must be >= 1.")
        if num_layers < 1:
            raise ValueError(f"num_layers ({num_layers}) must be >= 1.")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout ({dropout}) must be in [0, 1).")
        if not online_cmn_frames >= 0:
            raise ValueError(f"online_cmn_frames ({online_cmn_frames}) must be >= 0 (0: off).")
        if not online_cmn_gate_db >= 0:
            raise ValueError(f"online_cmn_gate_db ({online_cmn_gate_db}) must be >= 0 (0: every frame counts).")
        if not online_cmn_noise_snr_db >= 0:
            raise ValueError(f"online_cmn_noise_snr_db ({online_cmn_noise_snr_db}) must be >= 0 (0: no noise tracker).")
        if online_cmn_noise_snr_db > 0 and not online_cmn_gate_db > 0:
            raise ValueError(f"online_cmn_noise_snr_db ({online_cmn_noise_snr_db}) needs the speech gate: "
                             "set online_cmn_gate_db > 0 too.")
        if isinstance(chunk_lookahead, bool) or not isinstance(chunk_lookahead, int) or chunk_lookahead < 0:
            raise ValueError(f"chunk_lookahead ({chunk_lookahead!r}) must be an int >= 0 (encoder frames; 0: none).")
        if chunk_lookahead > 0 and not causal:
            raise ValueError("chunk_lookahead > 0 shapes chunked streaming, which needs causal=True.")
        self.chunk_lookahead = chunk_lookahead
        self.online_cmn_frames = float(online_cmn_frames)
        self.online_cmn_gate_db = float(online_cmn_gate_db)
        self.online_cmn_noise_snr_db = float(online_cmn_noise_snr_db)
        self.register_buffer("cmvn_mean", torch.zeros(input_dim))
        self.register_buffer("cmvn_istd", torch.ones(input_dim))
        self.subsampling = Conv2dSubsampling(input_dim, d_model, subsampling, subsampling_channels)
        self.scheme = build_position_scheme(pos_enc, d_model, num_heads, **scheme_options)
        self.num_heads = num_heads
        self.blocks = nn.ModuleList(
            ConformerBlock(d_model, num_heads, ffn_dim, conv_kernel, causal, self.scheme, dropout, conv_norm,
                           conv_causal_pad)
            for _ in range(num_layers)
        )
        self.dropout = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(d_model)
        self.input_dim = input_dim
        self.d_model = d_model
        self.causal = causal
        self.scale = math.sqrt(d_model) if xscale else 1.0

    @property
    def output_size(self) -> int:
        return self.d_model

    @property
    def subsampling_rate(self) -> int:
        return self.subsampling.rate

    @property
    def right_context(self) -> int:
        """Feature frames of lookahead the subsampling needs beyond an output's first frame."""
        return self.subsampling.right_context

    def chunk_window(self, chunk_size: int) -> int:
        """Feature frames behind one chunk of C encoder frames and its ``chunk_lookahead`` (what a runtime
        that steps whole chunks feeds each step; consecutive steps start ``subsampling_rate * C`` apart)."""
        sub = self.subsampling
        return sub.window + sub.rate * (chunk_size + self.chunk_lookahead - 1)

    def output_length(self, lengths):
        """Encoder frames for ``lengths`` feature frames (int or int tensor)."""
        return self.subsampling.output_length(lengths)

    def set_cmvn(self, mean: torch.Tensor, istd: torch.Tensor) -> None:
        """Fill the global CMVN buffers: features become ``(x - mean) * istd``. Both (F,)."""
        mean, istd = torch.as_tensor(mean), torch.as_tensor(istd)
        if mean.shape != (self.input_dim,) or istd.shape != (self.input_dim,):
            raise ValueError(
                f"cmvn mean {tuple(mean.shape)} and istd {tuple(istd.shape)} must both be ({self.input_dim},)."
            )
        self.cmvn_mean.copy_(mean)
        self.cmvn_istd.copy_(istd)

    def online_cmn(self) -> OnlineCmn | None:
        """The running-mean normalization this encoder's inputs get (None when off). ``forward`` applies it;
        a streaming frontend applies ``online_cmn().stream()`` to its frames before ``stream_step``."""
        if self.online_cmn_frames == 0:
            return None
        gate = None
        if self.online_cmn_gate_db > 0:
            gate = SpeechGate(margin_db=self.online_cmn_gate_db, noise_snr_db=self.online_cmn_noise_snr_db)
        return OnlineCmn(self.cmvn_mean, self.online_cmn_frames, gate)

    def _check_feats(self, feats: torch.Tensor) -> None:
        if feats.dim() != 3 or feats.size(2) != self.input_dim:
            raise ValueError(f"feats must be (B, T, {self.input_dim}); got {tuple(feats.shape)}.")

    def _embed(self, feats: torch.Tensor) -> torch.Tensor:
        """Normalized feats (B, T, F) -> scaled subsampled frames (B, T', D) (no positions yet).

        Long inputs go through the convolutions in pieces of :data:`EMBED_PIECE` output frames:
        output t reads input frames [rate*t, rate*t + window) only, so the pieces give the same
        frames, and the conv activations (channels x T/2 x F/2 floats: 1.8 GB for an hour at 64
        channels) stay the size of one piece.
        """
        sub = self.subsampling
        frames = sub.output_length(feats.size(1))
        if frames <= EMBED_PIECE:
            return sub(feats) * self.scale
        pieces = [sub(feats[:, sub.rate * t : sub.rate * (min(frames, t + EMBED_PIECE) - 1) + sub.window])
                  for t in range(0, frames, EMBED_PIECE)]
        return torch.cat(pieces, dim=1) * self.scale  # (B, T', D)

    def forward(
        self, feats: torch.Tensor, lengths: torch.Tensor, chunk_size: int = 0, left_chunks: int = -1,
        start_time: int = 0, chunk_phase: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode a padded batch, full context or with a chunk mask.

        Args:
            feats: (B, T, F) zero-padded features.
            lengths: (B,) valid frames per row.
            chunk_size: C encoder frames per chunk; 0 = full context.
            left_chunks: chunks of left context, -1 = unlimited.
            start_time: absolute encoder time of the first frame (default 0): what a stream whose
                clock starts there (``init_state(start_time=...)``) computes, chunk for chunk.
            chunk_phase: shifts the chunk grid (training only): frame t is in chunk (t + phase) // C, so
                the first chunk is C - phase frames long (``asr.model.masks``). A stream always starts a
                chunk at its first frame (phase 0).
        Returns:
            out (B, T', D) and out_lens (B,) int64; frames past out_lens are padding.
        """
        check_chunk_args(chunk_size, left_chunks)
        self._check_feats(feats)
        if lengths.shape != (feats.size(0),):
            raise ValueError(f"lengths {tuple(lengths.shape)} must be ({feats.size(0)},) for feats {tuple(feats.shape)}.")
        if tracing() or torch.is_grad_enabled():
            # No host read inside a compiled graph or a training step (it would stall the launch queue
            # until the device caught up): the kernel checks the lengths as it runs.
            torch._assert_async((lengths <= feats.size(1)).all(), "lengths exceed the feature length")
        elif not lengths.is_meta and lengths.numel() and int(lengths.max()) > feats.size(1):  # meta: no values
            raise ValueError(f"lengths max ({int(lengths.max())}) exceeds the feature length ({feats.size(1)}).")
        norm = self.online_cmn()
        if norm is not None:
            feats = norm(feats)  # causal: the zero padding after a row never reaches its frames
        x = self._embed((feats - self.cmvn_mean) * self.cmvn_istd)  # (B, T', D)
        out_lens = self.output_length(lengths.long())  # (B,)
        x = self.dropout(self.scheme.embed_input(x, start_time))
        if chunk_size > 0 and self.chunk_lookahead > 0:
            check_chunk_phase(chunk_size, chunk_phase)
            # every chunk of a layer at once; _forward_chunks loops over them
            x = forward_windows(self.blocks, x, out_lens, chunk_size=chunk_size, left_chunks=left_chunks,
                                phase=chunk_phase, start_time=start_time, lookahead=self.chunk_lookahead)
            return self.norm(x), out_lens
        # The mask as its parameters: scorers that run in blocks never build the (B, T', T') tensor.
        mask = ChunkMask(out_lens, x.size(1), chunk_size, left_chunks, chunk_phase)
        if not use_blocked(x.size(0), self.num_heads, x.size(1), x.size(1), torch.is_grad_enabled()):
            # Every layer's scorer takes the explicit path and would build the dense mask itself: build it
            # once. It also keeps the ChunkMask's ints out of compiled blocks, whose guards would otherwise
            # specialize on them (chunk 0 or not, left chunks -1 or not) and recompile (asr/train/compile.py).
            mask = mask.dense()  # (B, T', T') or (B, 1, T')
        pad = padding_mask(out_lens, x.size(1))  # (B, T')
        for block in self.blocks:
            x, _, _ = block(x, mask, pad, start_time=start_time)
        return self.norm(x), out_lens

    def _forward_chunks(
        self, x: torch.Tensor, out_lens: torch.Tensor, chunk_size: int, left_chunks: int, phase: int,
        start_time: int, lookahead: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The chunked forward as a loop over chunks, each seeing ``lookahead`` frames past its end.

        Chunk k holds frames [s, e) of the grid ``(t + phase) // C``; its layers run on frames
        [s, min(e + lookahead, T')) with every layer's K/V of the last ``left_chunks * C`` chunk frames
        before s (the frames the chunk mask shows) and the conv inputs just before s, exactly the
        caches of a stream. With lookahead 0 this equals the chunk-masked forward (tested), which is
        what makes it the reference for streams with lookahead.

        Args:
            x: (B, T', D) embedded frames (positions and dropout applied); out_lens: (B,).
        Returns:
            out (B, T', D) after the final norm, and out_lens.
        """
        total = x.size(1)
        budget = -1 if left_chunks < 0 else left_chunks * chunk_size
        caches = [LayerCache() for _ in self.blocks]
        outputs = []
        start, end = 0, chunk_size - phase
        while start < total:
            end = min(end, total)
            stop = min(end + lookahead, total)
            cached = caches[0].cached_frames
            key_times = torch.arange(start - cached, stop, device=x.device)  # (M + n + r,)
            valid = key_times[None, :] < out_lens[:, None]  # (B, M + n + r): rows end at out_lens
            h = x[:, start:stop]  # (B, n + r, D)
            for block, cache in zip(self.blocks, caches):
                attn_cache = None if cache.key is None else (cache.key, cache.value)
                h, kv, cache.conv = block(h, mask=valid[:, None, :], pad_mask=valid[:, cached:],
                                          attn_cache=attn_cache, conv_cache=cache.conv,
                                          start_time=start_time + start, lookahead=stop - end)
                cache.store_attention(kv, budget)
            outputs.append(h[:, : end - start])
            start, end = end, end + chunk_size
        return self.norm(torch.cat(outputs, dim=1)), out_lens  # (B, T', D)

    # ---- streaming -------------------------------------------------------------

    def init_state(self, batch_size: int, chunk_size: int, left_chunks: int = -1, start_time: int = 0) -> StreamState:
        """Fresh state for ``batch_size`` lock-step streams (see ``asr.streaming.state``).

        ``start_time``: absolute encoder time of the stream's first frame (default 0). A
        later clock is a stream that has already run that long (the ablation's translation
        probe): relative schemes give the same output at any clock once the left context is
        bounded; absolute ones (and wenet_rel) read their tables there.
        """
        if start_time < 0:
            raise ValueError(f"start_time ({start_time}) must be >= 0.")
        if not self.causal:
            raise ValueError("streaming needs a causal conv module; this encoder was built with causal=False.")
        check_chunk_args(chunk_size, left_chunks)
        if chunk_size == 0:
            raise ValueError("streaming needs chunk_size > 0 (0 means full context, which cannot stream).")
        if batch_size < 1:
            raise ValueError(f"batch_size ({batch_size}) must be >= 1.")
        layers = [LayerCache() for _ in self.blocks]
        return StreamState(batch_size=batch_size, chunk_size=chunk_size, left_chunks=left_chunks, layers=layers,
                           time=start_time)

    @torch.no_grad()
    def stream_step(
        self, feats: torch.Tensor, state: StreamState, final: bool = False
    ) -> tuple[torch.Tensor, StreamState]:
        """Feed n >= 0 new feature frames; return the encoder frames they complete.

        Inference only: it runs without autograd, so the cached tensors never hold
        a graph reaching back over the whole stream.

        Args:
            feats: (B, n, F) features; global CMVN is applied here, the running mean of
                ``online_cmn()`` (when on) must have been applied by the caller, frame by frame.
            state: from :meth:`init_state` or the previous call; updated in place.
            final: end of stream: also encode the last partial chunk.
        Returns:
            out (B, n', D): whole chunks completed by this call (plus the partial
            last chunk when final), and the state.
        """
        if state.finished:
            raise ValueError("this stream was finished (final=True); start a new one with init_state().")
        self._check_feats(feats)
        if feats.size(0) != state.batch_size:
            raise ValueError(f"feats batch ({feats.size(0)}) differs from the stream's batch_size ({state.batch_size}).")
        if len(state.layers) != len(self.blocks):
            raise ValueError(f"state has {len(state.layers)} layer caches; the encoder has {len(self.blocks)} blocks.")
        self._subsample_new(feats, state)
        outputs = []
        C, r = state.chunk_size, self.chunk_lookahead
        while state.pending is not None and (state.pending.size(1) >= C + r or final):
            n = min(C, state.pending.size(1))
            window, rest = state.pending[:, : n + r], state.pending[:, n:]  # the chunk and its lookahead
            state.pending = rest if rest.size(1) > 0 else None
            outputs.append(self._encode_chunk(window, state, window.size(1) - n))
        if final:
            state.finished = True
            state.feats = None
        if outputs:
            return torch.cat(outputs, dim=1), state  # (B, n', D)
        return feats.new_zeros(state.batch_size, 0, self.d_model), state

    def _subsample_new(self, feats: torch.Tensor, state: StreamState) -> None:
        """Append normalized feats to the buffer and move every complete subsampled frame to ``pending``."""
        if feats.size(1) > 0:
            feats = (feats - self.cmvn_mean) * self.cmvn_istd  # (B, n, F)
            state.feats = feats if state.feats is None else torch.cat([state.feats, feats], dim=1)
        if state.feats is None:
            return
        sub = self.subsampling
        n_out = sub.output_length(state.feats.size(1))
        if n_out == 0:
            return
        # Output t needs input frames [rate*t, rate*t + window); consume exactly those.
        used = sub.window + sub.rate * (n_out - 1)
        y = self._embed(state.feats[:, :used])  # (B, n_out, D)
        rest = state.feats[:, sub.rate * n_out :]
        state.feats = rest if rest.size(1) > 0 else None
        state.pending = y if state.pending is None else torch.cat([state.pending, y], dim=1)

    def _encode_chunk(self, x: torch.Tensor, state: StreamState, lookahead: int = 0) -> torch.Tensor:
        """Run one chunk and its lookahead (B, c + lookahead, D), c <= C, at each row's absolute time through
        all blocks; returns the chunk's c frames (B, c, D)."""
        if state.row_times is None:
            x = self.scheme.embed_input(x, state.time)
            start_time: int | torch.Tensor = state.time
        else:  # rows at different stream times (stacked streams): absolute tables differ per row
            x = torch.cat([self.scheme.embed_input(x[b : b + 1], t) for b, t in enumerate(state.row_times)])
            start_time = torch.tensor(state.row_times, device=x.device)  # (B,)
        x = self.dropout(x)
        mask = state.key_mask(x.size(1))  # (B, 1, M + c) or None
        for block, cache in zip(self.blocks, state.layers):
            attn_cache = None if cache.key is None else (cache.key, cache.value)
            x, kv, cache.conv = block(x, mask=mask, attn_cache=attn_cache, conv_cache=cache.conv,
                                      start_time=start_time, lookahead=lookahead)
            cache.store_attention(kv, state.cache_budget)
        x = x[:, : x.size(1) - lookahead]
        state.advance_rows(x.size(1))
        return self.norm(x)


def build_encoder(pos_enc: str = "rel_xl", **kwargs) -> ConformerEncoder:
    """Build a :class:`ConformerEncoder` (the factory configs and checkpoints call).

    ``pos_enc`` is one of :data:`asr.model.positions.POSITION_SCHEMES`; every
    other keyword is a :class:`ConformerEncoder` argument (its signature holds the
    defaults) or a scheme option (``max_distance`` for shaw/rel_bias, ``max_len`` for
    abs_learned, ``base`` for rope).
    """
    return ConformerEncoder(pos_enc, **kwargs)
