"""Dynamic chunk sampling for U2-style training (one draw per training batch).

The encoder never samples: the LightningModule draws ``(chunk_size, left_chunks)``
here and passes them to the model. The draws come from a private ``torch.Generator``
seeded from the config, so they do not touch (or depend on) the global RNG, and its
state is saved in checkpoints so a resumed run continues the same sequence. Every DDP
rank uses the same seed, hence the same chunk shape per step, which keeps the ranks'
step times balanced.
"""

from __future__ import annotations

import torch


class DynamicChunkSampler:
    """Draws the attention context of one training batch.

    With probability ``p_full`` the batch trains full-context: ``(0, -1)``. Otherwise
    ``chunk_size`` is uniform in ``[min_chunk, max_chunk]`` encoder frames and ``left_chunks``
    is -1 (unlimited) with probability ``p_unlimited_left``, else uniform in
    ``[0, max_left]``. With ``random_phase`` the chunk grid of a chunked batch also shifts by a
    uniform phase in ``[0, chunk_size)`` (:meth:`phase`), so utterance onsets fall anywhere within
    a chunk as a live stream's do; without it no draw is spent on the phase. With
    ``onset_edge_prob`` > 0, :meth:`onset_edges` chooses the utterances of a chunked batch whose
    speech onset moves to one of the last ``onset_edge_frames`` frames of a chunk
    (``asr.train.onsets``); at 0 it draws nothing.
    """

    def __init__(
        self,
        p_full: float = 0.5,
        max_chunk: int = 25,
        max_left: int = 8,
        p_unlimited_left: float = 0.5,
        seed: int = 0,
        random_phase: bool = False,
        onset_edge_prob: float = 0.0,
        onset_edge_frames: int = 4,
        min_chunk: int = 1,
    ) -> None:
        for name, p in (("p_full", p_full), ("p_unlimited_left", p_unlimited_left), ("onset_edge_prob", onset_edge_prob)):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} ({p}) must be a probability in [0, 1].")
        if not 1 <= min_chunk <= max_chunk:
            raise ValueError(f"need 1 <= min_chunk <= max_chunk; got min_chunk {min_chunk}, max_chunk {max_chunk}.")
        if max_left < 0:
            raise ValueError(f"max_left ({max_left}) must be >= 0.")
        self.p_full = p_full
        self.min_chunk = min_chunk
        self.max_chunk = max_chunk
        self.max_left = max_left
        self.p_unlimited_left = p_unlimited_left
        if onset_edge_frames < 1:
            raise ValueError(f"onset_edge_frames ({onset_edge_frames}) must be >= 1.")
        self.random_phase = random_phase
        self.onset_edge_prob = onset_edge_prob
        self.onset_edge_frames = onset_edge_frames
        self.generator = torch.Generator().manual_seed(seed)

    def _uniform(self) -> float:
        return torch.rand((), generator=self.generator).item()

    def _int(self, low: int, high: int) -> int:
        """Uniform integer in [low, high]."""
        return int(torch.randint(low, high + 1, (), generator=self.generator).item())

    def sample(self) -> tuple[int, int]:
        """Returns ``(chunk_size, left_chunks)``; ``(0, -1)`` means full context."""
        # Always consume the same number of draws so the sequence does not depend on
        # which branch earlier batches took.
        u_full, u_left = self._uniform(), self._uniform()
        chunk = self._int(self.min_chunk, self.max_chunk)
        left = self._int(0, self.max_left)
        if u_full < self.p_full:
            return 0, -1
        return chunk, (-1 if u_left < self.p_unlimited_left else left)

    def phase(self, chunk_size: int) -> int:
        """The grid's phase for a batch drawn with ``chunk_size``: uniform in [0, chunk_size) with
        ``random_phase``, else 0 (and 0 for full context, which has no grid)."""
        if not self.random_phase or chunk_size <= 1:
            return 0
        return self._int(0, chunk_size - 1)

    def onset_edges(self, batch_size: int, chunk_size: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Which utterances of a batch drawn with ``chunk_size`` get their onset at a chunk edge, and
        where: ``(chosen (B,) bool, edge_offsets (B,) int64 in [1, min(onset_edge_frames, C)])``,
        offset 1 being the chunk's last frame. None for full context or when ``onset_edge_prob`` is 0
        (then no draw is spent)."""
        if self.onset_edge_prob <= 0.0 or chunk_size < 1:
            return None
        chosen = torch.rand(batch_size, generator=self.generator) < self.onset_edge_prob
        edge = min(self.onset_edge_frames, chunk_size)
        offsets = torch.randint(1, edge + 1, (batch_size,), generator=self.generator)
        return chosen, offsets

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])
