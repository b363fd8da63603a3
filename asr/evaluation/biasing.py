"""The biasing benchmark's evaluation: WER, U-WER and B-WER per list size, decoding and LM setting.

Reads a split built by ``asr.synth.biasing`` (``cuts_<split>.jsonl.gz`` and
``biasing/<split>_lists.jsonl``: per cut id its rare words "biased" and its "distractors"), runs the
encoder once per utterance and then, for each setting, the CTC prefix beam search (partials' ranking
and finals) and attention rescoring of its n-best with that utterance's list compiled into a context
graph. The no-biasing row is scored against each utterance's own rare words (the N = 0 list); every
other row against the list it decoded with (Le et al.: an inserted distractor is a B error).

Also: the false-alarm check (ordinary utterances, one fixed list of rare words none of them holds)
and the cost of biasing (search CPU time per setting, list compile time).

Axis legend: T' encoder frames, D model dim, V vocab.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from asr.decode.biased_wer import BiasedErrorCounter
from asr.decode.ctc_prefix_beam import ctc_prefix_beam_search
from asr.decode.hotwords import Biasing, HotwordCompiler
from asr.decode.rescoring import rescoring_scores
from asr.evaluation.split import EvalSet, duration_batches
from asr.lm.fusion import Fusion

NO_LIST = None  # the list-size key of the no-biasing rows


def read_lists(path: str | Path) -> dict[str, dict]:
    """cut id -> {"id", "biased", "distractors"} from a ``<split>_lists.jsonl`` file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"biasing lists not found: {path} (scripts/prepare_data.py --biasing writes them)")
    entries = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {e["id"]: e for e in entries}


def utterance_list(entry: dict, num_distractors: int) -> list[str]:
    """An utterance's biasing list at N distractors: its rare words and the first N of its distractors."""
    if num_distractors > len(entry["distractors"]):
        raise ValueError(f"{entry['id']}: {num_distractors} distractors asked, {len(entry['distractors'])} stored")
    return [*entry["biased"], *entry["distractors"][:num_distractors]]


@dataclass
class Encoded:
    """One utterance after the encoder: enc_out (1, T', D), log_probs (T', V), reference text."""

    key: str
    text: str
    enc_out: torch.Tensor
    log_probs: torch.Tensor


@torch.inference_mode()
def encode_all(model, eval_set: EvalSet, batch_seconds: float = 100.0) -> tuple[list[Encoded], float]:
    """Every utterance through the encoder once (full context); returns them and the CPU seconds it took."""
    utts = eval_set.utterances
    out: list[Encoded | None] = [None] * len(utts)
    start = time.process_time()
    for batch in duration_batches([u.seconds for u in utts], batch_seconds):
        feats = torch.nn.utils.rnn.pad_sequence([utts[i].feats for i in batch], batch_first=True)  # (B, T, F)
        lens = torch.tensor([utts[i].feats.size(0) for i in batch])  # (B,)
        enc_out, enc_lens = model.encode(feats, lens)  # (B, T', D)
        log_probs = model.ctc_log_probs(enc_out)  # (B, T', V)
        for row, (i, n) in enumerate(zip(batch, enc_lens.tolist())):
            out[i] = Encoded(utts[i].key, utts[i].text, enc_out[row:row + 1, :n].clone(), log_probs[row, :n].clone())
    return out, time.process_time() - start


@dataclass
class Row:
    """One setting's scores: the CTC prefix beam's counter, attention rescoring's per share of the hotword
    bonus it keeps, and CPU seconds of the searches (beam and rescoring) and of compiling the lists."""

    ctc: BiasedErrorCounter
    rescored: dict[float, BiasedErrorCounter]
    search_cpu_s: float
    compile_cpu_s: float


@torch.inference_mode()
def decode_setting(model, tokenizer, encoded: Sequence[Encoded], lists: Sequence[list[str] | None],
                   score_lists: Sequence[list[str]], compiler: HotwordCompiler, fusion: Fusion | None, beam: int,
                   ctc_weight: float, rescore_weights: Sequence[float], unbiased_keep: int | None = None,
                   reverse_weight: float = 0.0) -> Row:
    """Decode every utterance with its list (None: no biasing); score against ``score_lists``. The n-best is
    rescored once per entry of ``rescore_weights`` (the share of the hotword bonus rescoring keeps).
    ``unbiased_keep``: the search's room for unbiased prefixes (``asr.decode.ctc_prefix_beam``);
    ``ctc_weight``, ``reverse_weight``: the rescoring mix (``asr.decode.rescoring``)."""
    row = Row(BiasedErrorCounter(), {w: BiasedErrorCounter() for w in rescore_weights}, 0.0, 0.0)
    for utt, words, scored_with in zip(encoded, lists, score_lists):
        start = time.process_time()
        biasing: Biasing | None = compiler.compile(words) if words else None
        row.compile_cpu_s += time.process_time() - start
        start = time.process_time()
        fused = fusion.with_words(biasing.words) if fusion is not None and biasing is not None else fusion
        graph = biasing.graph if biasing is not None else None
        nbest = ctc_prefix_beam_search(utt.log_probs, beam, model.blank_id, fused, graph, unbiased_keep)
        best = nbest[0][0] if nbest else []
        rescored = dict.fromkeys(rescore_weights, best)
        if nbest and model.decoder is not None and utt.enc_out.size(1) > 0:
            base = rescoring_scores(model, utt.enc_out, utt.enc_out.size(1), nbest, ctc_weight, reverse_weight,
                                    fused)  # (N,)
            bonus = (torch.tensor([graph.sentence_score(h) for h, _ in nbest], dtype=torch.float64)
                     if graph is not None else torch.zeros(len(nbest), dtype=torch.float64))  # (N,)
            for w in rescore_weights:
                rescored[w] = nbest[int((base + w * bonus).argmax())][0]
        row.search_cpu_s += time.process_time() - start
        row.ctc.add(utt.text, tokenizer.decode(best), scored_with)
        for w, hyp in rescored.items():
            row.rescored[w].add(utt.text, tokenizer.decode(hyp), scored_with)
    return row


def compile_times_ms(compiler_factory, lists: Sequence[list[str]]) -> tuple[list[float], list[float]]:
    """(wall, CPU) milliseconds to compile each list with a fresh (uncached) compiler. The CPU time is the
    steadier on a shared machine; the wall time is what a client waits."""
    wall, cpu = [], []
    for words in lists:
        compiler = compiler_factory()
        start, start_cpu = time.perf_counter(), time.thread_time()
        compiler.compile(words)
        wall.append(1000 * (time.perf_counter() - start))
        cpu.append(1000 * (time.thread_time() - start_cpu))
    return wall, cpu


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")
