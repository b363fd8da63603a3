"""KenLM as the n-gram backend for large language models (the optional ``kenlm`` package).

Our estimator (asr.lm.ngram) keeps every n-gram in Python dictionaries: right for the corpus LMs,
hopeless for a LibriSpeech 4-gram with hundreds of millions of n-grams. :class:`KenLMNgram` wraps a
``kenlm.Model`` (an ARPA file, gzip or not, or a KenLM binary) behind the interface the fusions use
(``order``, ``eos_id``, ``logprob(history, token)``, ``sentence_logprob``), so ``ShallowFusion`` and
``WordFusion`` take either. Scores are KenLM's log10 values in natural log: on an ARPA file both
backends compute the same back-off probability (tests/lm/test_kenlm.py: 1e-4 per token).

Which one loads a file: a KenLM binary always goes to KenLM; an ARPA file goes to ours unless
``backend="kenlm"`` (``--lm-backend kenlm``). A binary word LM carries no readable vocabulary, so its
lexicon comes from ``<file>.vocab`` beside it (one word a line, ``<unk>`` among them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from asr.lm.ngram import BOS, CACHE_ENTRIES, ngram_context

LOG10 = math.log(10.0)
BINARY_MAGIC = b"mmap lm "  # the first bytes of every KenLM binary
BACKENDS = ("auto", "ours", "kenlm")
INSTALL_HINT = "pip install kenlm (or pip install -e '.[kenlm]'; it builds with the C++ compiler)"


def is_kenlm_binary(path: str | Path) -> bool:
    with open(path, "rb") as f:
        return f.read(len(BINARY_MAGIC)) == BINARY_MAGIC


def use_kenlm(path: str | Path, backend: str) -> bool:
    """Whether ``backend`` ("auto", "ours", "kenlm") loads ``path`` with KenLM; a binary needs KenLM."""
    if backend not in BACKENDS:
        raise ValueError(f"LM backend {backend!r} must be one of {', '.join(BACKENDS)}")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"language model not found: {path}")
    binary = is_kenlm_binary(path)
    if binary and backend == "ours":
        raise ValueError(f"{path} is a KenLM binary: only the kenlm backend reads it")
    return binary or backend == "kenlm"


def _kenlm():
    try:
        import kenlm
    except ImportError:
        raise ImportError(f"the kenlm package is not installed: {INSTALL_HINT}") from None
    return kenlm


class KenLMNgram:
    """A ``kenlm.Model`` over the symbols ``names`` (id i is ``names[i]``, the last id ends a sentence).

    Args:
        path: ARPA (.arpa or .arpa.gz) or KenLM binary.
        names: the symbol of every id; ``names[eos_id]`` is scored as ``</s>``.
    """

    def __init__(self, path: str | Path, names: Sequence[str]) -> None:
        kenlm = _kenlm()
        self.path = Path(path)
        self.model = kenlm.Model(str(self.path))
        self._kenlm = kenlm
        self.order = self.model.order
        self.eos_id = len(names) - 1
        self.names = [*names[:-1], "</s>"]
        self._cache: dict[tuple[tuple[int, ...], int], float] = {}
        self._states: dict[tuple[int, ...], object] = {}

    def context(self, history: Sequence[int]) -> tuple[int, ...]:
        """The last order - 1 ids of <s> + history (as ``NgramLM.context``)."""
        return ngram_context(self.order, history)

    def _state(self, ctx: tuple[int, ...]):
        state = self._states.get(ctx)
        if state is None:
            state = self._kenlm.State()
            if ctx and ctx[0] == BOS:
                self.model.BeginSentenceWrite(state)
                ctx_words = ctx[1:]
            else:
                self.model.NullContextWrite(state)
                ctx_words = ctx
            for tok in ctx_words:
                nxt = self._kenlm.State()
                self.model.BaseScore(state, self.names[tok], nxt)
                state = nxt
            if len(self._states) >= CACHE_ENTRIES:
                self._states.clear()
            self._states[ctx] = state
        return state

    def logprob(self, history: Sequence[int], token: int) -> float:
        """log P(token | history), natural log; history holds the sentence's ids so far (no <s>)."""
        ctx = self.context(history)
        key = (ctx, token)
        cached = self._cache.get(key)
        if cached is None:
            out = self._kenlm.State()
            cached = self.model.BaseScore(self._state(ctx), self.names[token], out) * LOG10
            if len(self._cache) >= CACHE_ENTRIES:
                self._cache.clear()
            self._cache[key] = cached
        return cached

    def sentence_logprob(self, tokens: Sequence[int]) -> float:
        """log P(tokens, then </s>) from the start of a sentence."""
        return sum(self.logprob(tokens[:i], tok) for i, tok in enumerate(tokens)) + self.logprob(tokens, self.eos_id)

    def known(self, word: str) -> bool:
        """Whether the model has the symbol (KenLM scores any other as <unk>)."""
        return word in self.model


def load_kenlm_token_lm(path: str | Path, tokenizer) -> KenLMNgram:
    """A token LM for ``tokenizer`` through KenLM; every unit but <blank> must be in its vocabulary."""
    from asr.lm.token_lm import token_names

    names = token_names(tokenizer)
    names[tokenizer.sos_eos_id] = "</s>"
    if tokenizer.sos_eos_id != len(names) - 1:
        raise ValueError(f"the tokenizer's <sos/eos> ({tokenizer.sos_eos_id}) is not its last id")
    lm = KenLMNgram(path, names)
    # KenLM always holds <unk> (its id 0, which `in` does not report)
    unscored = [n for i, n in enumerate(names)
                if i not in (tokenizer.blank_id, tokenizer.unk_id) and n != "</s>" and not lm.known(n)]
    if unscored:
        raise ValueError(f"{path}: the tokenizer has {len(unscored)} units the language model cannot score "
                         f"({', '.join(map(repr, unscored[:5]))}); build the LM with this tokenizer")
    return lm


def load_kenlm_word_lm(path: str | Path) -> tuple[KenLMNgram, list[str]]:
    """(lm, names) of a word LM through KenLM: the vocabulary from the ARPA text, or ``<file>.vocab`` for a binary."""
    from asr.lm.words import arpa_vocabulary, word_names

    path = Path(path)
    if is_kenlm_binary(path):
        vocab = Path(f"{path}.vocab")
        if not vocab.is_file():
            raise FileNotFoundError(f"{path} is a KenLM binary, whose vocabulary (the lexicon) cannot be read; "
                                    f"put it in {vocab}, one word a line")
        words = [w for w in vocab.read_text(encoding="utf-8").split() if w not in ("<s>", "</s>")]
    else:
        words = arpa_vocabulary(path)
    names = word_names(path, words)
    return KenLMNgram(path, names), names
