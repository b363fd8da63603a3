"""Hotword lists: from text to a context graph over the model's tokens (``asr.decode.context_graph``).

A list entry is a phrase and, optionally, its own score per token; in a file, one entry a line as
``phrase`` or ``phrase:score`` (``#`` starts a comment line). A phrase goes through the training
text's normalization (:func:`phrase_normalizer`), then the model's tokenizer; its words join the
word LM's lexicon (``Fusion.with_words``), so a hotword outside the lexicon pays no OOV penalty.

:class:`HotwordCompiler` turns lists into :class:`Biasing` objects and keeps the ones it built last
used, keyed by content (the normalized phrases and their scores, in any order): a server whose clients
send the same list compiles it once. What it keeps is bounded in lists and in graph states together
(a state costs about 400 bytes: a 2000-phrase list of 100-character phrases is about 200k states).

Pure Python (the tokenizer aside), like the searches.
"""

from __future__ import annotations

import argparse
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from asr.decode.context_graph import ContextGraph, check_unbiased_keep
from asr.decode.ctc_prefix_beam import unbiased_keep_for

# Chosen on the biasing dev split (dev voices, never the test voices): the best rescored WER of scores
# 2, 4 and 6 per token, with most of the rare-word gain (data/results/hotwords_lm.md).
DEFAULT_HOTWORD_SCORE = 4.0
# Share of the hotword bonus attention rescoring adds to its sentence scores: with room for unbiased
# prefixes in the beam (ctc_prefix_beam.DEFAULT_UNBIASED_KEEP) the n-best holds more unbiased rivals,
# and twice the kept bonus restores the rare-word gain that a share of 1 loses to them; 3 adds nothing
# (biasing_dev, data/results/hotwords_lm.md).
DEFAULT_RESCORE_WEIGHT = 2.0
DEFAULT_MAX_PHRASES = 2000
DEFAULT_MAX_PHRASE_CHARS = 100
DEFAULT_CACHE_LISTS = 64
DEFAULT_CACHE_STATES = 500_000  # about 200 MiB of graphs: two or three of the longest lists a client may send

Entry = tuple[str, float | None]  # a phrase and its own score per token (None: the default)
_SPECIAL_PIECE = re.compile(r"^<[^<>]+>$")
_SYNTH_ALPHABET = set("abcdefghijklmnopqrstuvwxyz'")


class HotwordError(ValueError):
    """A hotword list that cannot be used; the message says which entry and why, in one line."""


@dataclass(frozen=True)
class HotwordLimits:
    """What one request may ask for (a server's clients; a local list is trusted)."""

    max_phrases: int = DEFAULT_MAX_PHRASES
    max_phrase_chars: int = DEFAULT_MAX_PHRASE_CHARS

    def __post_init__(self) -> None:
        if self.max_phrases < 1 or self.max_phrase_chars < 1:
            raise ValueError(f"hotword limits must be >= 1: {self}")

    def check(self, entries: Sequence[Entry]) -> None:
        """HotwordError naming the limit a list breaks."""
        if len(entries) > self.max_phrases:
            raise HotwordError(f"too many hotwords: {len(entries)} phrases (limit {self.max_phrases} per request)")
        for text, _ in entries:
            if len(text) > self.max_phrase_chars:
                raise HotwordError(f"hotword too long: {len(text)} characters in {text[:40]!r}... "
                                   f"(limit {self.max_phrase_chars} characters per phrase)")


@dataclass(frozen=True)
class Biasing:
    """A compiled hotword list: the graph the searches walk and the words it holds.

    phrases: (normalized text, score per token) of every phrase, sorted; words: their words.
    """

    graph: ContextGraph
    phrases: tuple[tuple[str, float], ...]
    words: frozenset[str]

    def settings(self) -> dict:
        return {"phrases": len(self.phrases), "graph_states": self.graph.num_states,
                "unbiased_keep": unbiased_keep_for(self.graph)}


def parse_entry(line: str) -> Entry:
    """``"phrase"`` or ``"phrase:score"`` -> (phrase, score or None). A colon not followed by a number is text."""
    text, sep, tail = line.rpartition(":")
    if sep:
        try:
            return text.strip(), float(tail)
        except ValueError:
            pass
    return line.strip(), None


def read_hotwords(path: str | Path) -> list[Entry]:
    """The entries of a hotword file (UTF-8, one a line; blank lines and ``#`` comment lines skipped)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"hotword file not found: {path}")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise HotwordError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    return [parse_entry(line) for line in lines if line.strip() and not line.lstrip().startswith("#")]


def as_entries(items: Iterable[str | Entry]) -> list[Entry]:
    """Strings (parsed as file lines) or (phrase, score) pairs -> entries."""
    out = []
    for item in items:
        if isinstance(item, str):
            out.append(parse_entry(item))
        else:
            text, score = item
            out.append((str(text), None if score is None else float(score)))
    return out


def _alphabet(tokenizer) -> set[str]:
    """Every character the tokenizer's pieces spell (specials and the word marker left out)."""
    special = {tokenizer.blank_id, tokenizer.unk_id, tokenizer.sos_eos_id}
    chars: set[str] = set()
    for i in range(tokenizer.vocab_size):
        piece = tokenizer.id_to_piece(i)
        if i not in special and not _SPECIAL_PIECE.match(piece):
            chars.update(piece.replace("\u2581", ""))
    return chars


def phrase_normalizer(tokenizer) -> Callable[[str], str]:
    """The text normalization of the model's training transcripts, as far as its tokenizer tells.

    A tokenizer of the synth corpus's alphabet (lowercase letters and apostrophes) gets the corpus's
    own ``normalize_text`` (lowercase, digits spelled, punctuation dropped); any other tokenizer gets
    spaces squeezed and letters folded to the case its pieces use, when they use only one. Letters
    the tokenizer cannot spell are left for the tokenizer check, never silently dropped.
    """
    from asr.data.text import normalize_text, squeeze_spaces

    alphabet = _alphabet(tokenizer)
    letters = {c for c in alphabet if c.isalpha()}
    fold: Callable[[str], str] = str
    if letters and all(c.islower() for c in letters):
        fold = str.lower
    elif letters and all(c.isupper() for c in letters):
        fold = str.upper
    if alphabet and alphabet <= _SYNTH_ALPHABET:
        def normalize(text: str) -> str:
            lost = sorted({c for c in text.lower() if c.isalpha() and c not in alphabet})
            if lost:
                raise HotwordError(f"hotword {text!r} has letters the model cannot spell: {''.join(lost)}")
            return normalize_text(text)
        return normalize
    return lambda text: fold(squeeze_spaces(text))


class HotwordCompiler:
    """Hotword lists -> :class:`Biasing`, with an LRU cache keyed by content.

    Args:
        tokenizer: the ASR model's (``encode``, ``id_to_piece``, special ids).
        default_score: bonus per token of a phrase without its own score (> 0).
        cache_size: compiled lists kept (0: none).
        cache_states: graph states (``ContextGraph.num_states``) of all the kept lists together; the least
            recently used lists go first, and a list larger than this alone is not kept.
        unbiased_keep: set on every graph it compiles (``ContextGraph.unbiased_keep``; None: the search's default).
    """

    def __init__(self, tokenizer, default_score: float = DEFAULT_HOTWORD_SCORE, cache_size: int = DEFAULT_CACHE_LISTS,
                 unbiased_keep: int | None = None, cache_states: int = DEFAULT_CACHE_STATES) -> None:
        if not (math.isfinite(default_score) and default_score > 0):
            raise ValueError(f"hotword score ({default_score}) must be a finite number > 0.")
        if cache_size < 0 or cache_states < 0:
            raise ValueError(f"cache_size ({cache_size}) and cache_states ({cache_states}) must be >= 0.")
        self.unbiased_keep = check_unbiased_keep(unbiased_keep, "hotword unbiased keep")
        self.tokenizer = tokenizer
        self.default_score = default_score
        self.cache_size = cache_size
        self.cache_states = cache_states
        self._normalize = phrase_normalizer(tokenizer)
        self._cache: OrderedDict[tuple, Biasing] = OrderedDict()
        self._cached_states = 0  # graph states of the lists in _cache
        self._lock = threading.Lock()  # a server compiles in a worker thread, tests from several threads
        self.hits = self.misses = 0

    @property
    def cached(self) -> tuple[int, int]:
        """(lists, graph states) the cache holds now."""
        with self._lock:
            return len(self._cache), self._cached_states

    def _phrase(self, text: str, score: float | None) -> tuple[str, float]:
        if score is None:
            score = self.default_score
        if not (math.isfinite(score) and score > 0):
            raise HotwordError(f"hotword {text!r}: score {score} must be a finite number > 0")
        normalized = self._normalize(text)
        if not normalized:
            raise HotwordError(f"empty hotword {text!r}" if text.strip() else "empty hotword")
        return normalized, float(score)

    def _tokens(self, text: str) -> tuple[int, ...]:
        ids = tuple(self.tokenizer.encode(text))
        if not ids or self.tokenizer.unk_id in ids:
            shown = "".join(sorted({c for c in text if not c.isspace() and self.tokenizer.unk_id in
                                    self.tokenizer.encode(c)}))
            raise HotwordError(f"hotword {text!r} has characters the model's tokenizer cannot spell"
                               + (f": {shown}" if shown else ""))
        return ids

    def compile(self, entries: Iterable[str | Entry]) -> Biasing | None:
        """The biasing for ``entries`` (None for an empty list); HotwordError for a bad entry."""
        phrases: dict[str, float] = {}
        for text, score in as_entries(entries):
            normalized, score = self._phrase(text, score)
            phrases[normalized] = max(score, phrases.get(normalized, 0.0))
        if not phrases:
            return None
        key = tuple(sorted(phrases.items()))
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self.hits += 1
                return hit
        graph = ContextGraph(((self._tokens(text), score) for text, score in key), unbiased_keep=self.unbiased_keep)
        biasing = Biasing(graph, key, frozenset(w for text, _ in key for w in text.split()))
        with self._lock:
            self.misses += 1
            states = graph.num_states
            if self.cache_size > 0 and states <= self.cache_states and key not in self._cache:
                self._cache[key] = biasing
                self._cached_states += states
                while len(self._cache) > self.cache_size or self._cached_states > self.cache_states:
                    _, evicted = self._cache.popitem(last=False)  # the least recently used
                    self._cached_states -= evicted.graph.num_states
        return biasing


def resolve(compiler: HotwordCompiler, hotwords: Biasing | Iterable[str | Entry] | None) -> Biasing | None:
    """A compiled list as it is, a list of entries compiled (None or empty: None)."""
    if hotwords is None or isinstance(hotwords, Biasing):
        return hotwords
    return compiler.compile(hotwords)


def count_argument(text: str) -> int:
    """An int >= 0 for argparse: a bad value is refused when the command line is read, not when it is used."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be >= 0")
    return value


def add_hotword_arguments(parser: argparse.ArgumentParser) -> None:
    """``--hotwords FILE``, ``--hotword-score S`` and ``--hotword-rescore-weight W``: the same in every script."""
    parser.add_argument("--hotwords", help="hotword file: one phrase a line, 'phrase:score' for its own score per "
                                           "token; biases the CTC beam (partials and finals) and the rescoring")
    parser.add_argument("--hotword-score", type=float, default=DEFAULT_HOTWORD_SCORE,
                        help=f"bonus per matched token of a phrase without its own score (default "
                             f"{DEFAULT_HOTWORD_SCORE}; tuned on the biasing dev split)")
    parser.add_argument("--hotword-rescore-weight", type=float, default=DEFAULT_RESCORE_WEIGHT,
                        help=f"weight of the kept hotword bonus in attention rescoring's sentence scores "
                             f"(default {DEFAULT_RESCORE_WEIGHT})")
    parser.add_argument("--hotword-unbiased-keep", type=count_argument, default=None, metavar="N",
                        help="prefixes the biased CTC beam keeps on their unbiased score beside its beam, so a "
                             "long list cannot prune what was said (default: asr.decode.ctc_prefix_beam."
                             "DEFAULT_UNBIASED_KEEP; 0: none, the search's cheapest)")


def biasing_from_args(args: argparse.Namespace, tokenizer) -> Biasing | None:
    """The biasing ``add_hotword_arguments``' options ask for (None without ``--hotwords``)."""
    if not getattr(args, "hotwords", None):
        return None
    compiler = HotwordCompiler(tokenizer, args.hotword_score, cache_size=0,
                               unbiased_keep=getattr(args, "hotword_unbiased_keep", None))
    return compiler.compile(read_hotwords(args.hotwords))
