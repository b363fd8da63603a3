"""Which cuts a split keeps: the cheap checks the sampler runs as it draws cuts (duration bounds,
empty text, text with no known tokens), each skip reported by reason."""

from __future__ import annotations

from asr.data.dataset import cut_text
from asr.data.tokenizer import SPACE


class CutFilter:
    """Cut -> keep it? Drops, and reports through ``on_skip(reason, cut_id, detail)``, cuts
    outside the duration bounds (when given) and cuts whose text has no known tokens."""

    def __init__(self, tokenizer, on_skip, min_duration: float | None = None,
                 max_duration: float | None = None) -> None:
        self.tokenizer, self.on_skip = tokenizer, on_skip
        self.min_duration, self.max_duration = min_duration, max_duration

    def __call__(self, cut) -> bool:
        if self.min_duration is not None and cut.duration < self.min_duration:
            self.on_skip("too_short", cut.id, f"{cut.duration:.2f} s < min_duration {self.min_duration}")
            return False
        if self.max_duration is not None and cut.duration > self.max_duration:
            self.on_skip("too_long", cut.id, f"{cut.duration:.2f} s > max_duration_per_utt {self.max_duration}")
            return False
        text = cut_text(cut)
        if not text:
            self.on_skip("empty_text", cut.id, "empty transcript")
            return False
        if not has_content(self.tokenizer, self.tokenizer.encode(text)):
            self.on_skip("untokenizable_text", cut.id, f"transcript {text[:40]!r} has no known tokens")
            return False
        return True


def has_content(tokenizer, ids: list[int]) -> bool:
    """False when every token is <unk> or a bare word boundary ("▁" alone carries no text)."""
    return any(i != tokenizer.unk_id and tokenizer.id_to_piece(i).strip(SPACE) for i in ids)
