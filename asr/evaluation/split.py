"""Decode a cut set and score it: the one split-level evaluation.

``scripts/decode.py``, the ablation (``asr.ablation.evaluate``) and, through
decode.py, the quickstart all score WER this way, so their numbers agree:

1. :func:`load_utterances` reads fbank features and reference text of the cuts
   in manifest order, skipping (and counting by reason) what cannot be scored;
2. :func:`evaluate_utterances` decodes them in duration-sorted batches with
   :func:`asr.decode.decode_batch`'s two halves (encoded once, searched once per mode), and scores every
   utterance.

With a memory budget, a batch whose forward would not fit is decoded one utterance at a
time, an utterance that fits only with the blocked attention is decoded with it, and one
that fits neither is skipped with a line saying what to do, counted as
``over_memory_budget`` (``asr.evaluation.memory``); the rest of the split is still decoded.

Axis legend: B batch, T feature frames, F feature bins.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from asr.data.features import FRAME_SHIFT_S
from asr.decode.batch import FUSED_MODES, MODES, search_encoded
from asr.decode.endpoint import EndpointConfig
from asr.decode.endpointed import endpoint_rule_name, resets_apply, search_utterances
from asr.decode.long_audio import encode_batch
from asr.decode.hotwords import DEFAULT_RESCORE_WEIGHT, Biasing
from asr.decode.scoring import Scoring
from asr.decode.pause_endpoint import PauseRule
from asr.decode.segment import PauseSegmenter, Pieces
from asr.decode.wer import ErrorCounter
from asr.evaluation.memory import format_bytes, plan_batch
from asr.lm.fusion import Fusion
from asr.decode.options import DEFAULT_BEAM, DEFAULT_CTC_WEIGHT


@dataclass(frozen=True)
class Utterance:
    """One cut ready to decode: ``feats`` (T, F), its reference ``text`` and audio ``seconds``."""

    key: str
    text: str
    feats: torch.Tensor
    seconds: float


@dataclass
class EvalSet:
    """The utterances of a cut set, in manifest order, and the cuts skipped on the way (reason -> count).
    ``references``: False for audio without reference text (decoded, not scored)."""

    utterances: list[Utterance]
    skipped: Counter = field(default_factory=Counter)
    references: bool = True


def usable_cuts(cuts_path, data_dir: str | Path | None = None, max_utts: int | None = None,
                skipped: Counter | None = None, min_samples: int | None = None, references: bool = True,
                ) -> Iterator[tuple[object, str, torch.Tensor]]:
    """(cut, reference text, audio (n,) at SAMPLE_RATE) of the first ``max_utts`` usable cuts (None: all).

    ``cuts_path``: a manifest file, or a CutSet whose audio paths are already resolved
    (``asr.data.inputs``). A cut is skipped and counted in ``skipped``, never fatal, when its
    text is empty (``empty_text``; not with ``references=False``: audio to decode without
    references, its text is ""), its audio cannot be read (the ``AudioError`` reason:
    ``audio_missing``, ``audio_corrupt``, ...) or is shorter than one fbank frame
    (``audio_too_short``: under ``min_samples``, default one legacy window); the reasons are
    those the training data loader counts.
    Any other exception is a bug and propagates. Relative audio paths resolve
    against ``data_dir`` (default: the manifest's folder).
    """
    from asr.data.audio import AudioError, cut_waveform
    from asr.data.dataset import cut_text
    from asr.data.features import SAMPLE_RATE, FbankExtractor
    from lhotse import CutSet

    from asr.data.manifest import read_cuts

    if max_utts is not None and max_utts < 1:
        raise ValueError(f"max_utts ({max_utts}) must be >= 1 or None")
    skipped = skipped if skipped is not None else Counter()
    min_samples = FbankExtractor().min_samples if min_samples is None else min_samples
    used = 0
    cuts = cuts_path if isinstance(cuts_path, CutSet) else read_cuts(cuts_path, data_dir)
    for cut in cuts:
        if max_utts is not None and used >= max_utts:
            return
        text = cut_text(cut)
        if not text and references:
            skipped["empty_text"] += 1
            continue
        try:
            audio = cut_waveform(cut, SAMPLE_RATE)  # (n,)
        except AudioError as err:
            skipped[err.reason] += 1
            continue
        if audio.numel() < min_samples:
            skipped["audio_too_short"] += 1
            continue
        used += 1
        yield cut, text, audio


def load_utterances(cuts_path, data_dir: str | Path | None = None,
                    max_utts: int | None = None, features=None, references: bool = True,
                    skipped: Counter | None = None) -> EvalSet:
    """Features and references of the first ``max_utts`` usable cuts of a manifest or CutSet (None: all);
    the skip rules are :func:`usable_cuts`'s. ``features``: the model's fbank options
    (``asr.data.features.FeatureConfig``, from its checkpoint; None: LEGACY). ``references=False``:
    audio without references, decoded and not scored; ``skipped``: counts so far (e.g. an input reader's)."""
    from asr.data.features import SAMPLE_RATE, FbankExtractor

    extractor = FbankExtractor(features)
    skipped = Counter(skipped or {})
    utts = [Utterance(cut.id, text, extractor(audio), audio.numel() / SAMPLE_RATE)
            for cut, text, audio in usable_cuts(cuts_path, data_dir, max_utts, skipped, extractor.min_samples,
                                                references)]
    return EvalSet(utts, skipped, references)


def load_inputs(sources, text=None, max_utts: int | None = None, features=None) -> EvalSet:
    """:func:`load_utterances` of audio files, folders, a Wenet data.list, a Kaldi wav.scp, a NeMo or a
    Lhotse manifest (``asr.data.inputs``: no corpus folder needed), references from the sources or
    the Kaldi-style ``text`` file; an entry the reader cannot use is counted as skipped."""
    from asr.data.inputs import read_inputs

    inputs = read_inputs(sources, text)
    return load_utterances(inputs.cuts, None, max_utts, features, inputs.references, inputs.skipped)


def duration_batches(seconds: Sequence[float], batch_seconds: float) -> Iterator[list[int]]:
    """Indices into ``seconds`` grouped shortest first (less padding): each group holds at most
    ``batch_seconds`` of audio, or one utterance longer than that."""
    if batch_seconds <= 0:
        raise ValueError(f"batch_seconds ({batch_seconds}) must be > 0")
    batch: list[int] = []
    total = 0.0
    for i in sorted(range(len(seconds)), key=seconds.__getitem__):
        if batch and total + seconds[i] > batch_seconds:
            yield batch
            batch, total = [], 0.0
        batch.append(i)
        total += seconds[i]
    if batch:
        yield batch


@dataclass
class ModeResult:
    """One decoding mode over an :class:`EvalSet`.

    ``records``: one dict per utterance in manifest order (key, ref, hyp, word_errors, substitutions,
    deletions, insertions, ref_words, char_errors, ref_chars, seconds); ``totals``: utterances,
    error and reference counts, wer, cer (fractions), decode_seconds (wall clock
    of the mode's search and of the encoder, which the modes share) and rtf (decode_seconds / audio seconds).
    Without references a record is (key, hyp, seconds) and wer, cer are None.
    """

    records: list[dict]
    totals: dict


@dataclass
class SplitResult:
    """Every requested mode over one :class:`EvalSet` with one decoding setting."""

    modes: dict[str, ModeResult]
    settings: dict
    audio_seconds: float
    skipped: Counter

    def summary(self) -> dict:
        """JSON-ready totals: settings, audio seconds, skipped cuts by reason and each mode's totals."""
        return {
            **self.settings,
            "audio_seconds": self.audio_seconds,
            "skipped_utterances": dict(sorted(self.skipped.items())),
            "modes": {mode: result.totals for mode, result in self.modes.items()},
        }


@torch.inference_mode()
def evaluate_utterances(
    model,
    tokenizer,
    eval_set: EvalSet,
    modes: Sequence[str],
    chunk_size: int = 0,
    left_chunks: int = -1,
    beam: int = DEFAULT_BEAM,
    ctc_weight: float = DEFAULT_CTC_WEIGHT,
    reverse_weight: float = 0.0,
    batch_seconds: float = 100.0,
    progress: bool = False,
    fusion: Fusion | None = None,
    memory_budget: int | None = None,
    biasing: Biasing | Mapping[str, Biasing | None] | None = None,
    hotword_rescore_weight: float = DEFAULT_RESCORE_WEIGHT,
    segmenter: PauseSegmenter | None = None,
    scoring: Scoring = Scoring(),
    endpoints: EndpointConfig | None = None,
    pause_endpoints: PauseRule | None = None,
) -> SplitResult:
    """Decode ``eval_set`` with every mode of ``modes`` and score it.

    Args:
        model: an ``AsrModel`` in eval mode; tokenizer: ``decode(ids) -> str``.
        modes: a subset of :data:`asr.decode.MODES`.
        chunk_size, left_chunks, beam, ctc_weight, reverse_weight: as in ``decode_batch``.
        batch_seconds: audio per decoding batch (a longer utterance is decoded alone).
        fusion: the language models (token, word or both) for the modes that take them (``FUSED_MODES``);
            the other modes decode without it, so a greedy row stays the acoustic baseline.
        biasing: hotwords for the same modes: one list for every utterance, or one per utterance key
            (a key that is missing gets none); hotword_rescore_weight: the share rescoring keeps.
        progress: show a progress bar in seconds of audio, moved as the encoder goes.
        memory_budget: bytes a forward may add at its peak (``asr.evaluation.memory``); None: no guard.
        segmenter: cut every utterance at its pauses (``asr.decode.segment``) and decode the pieces
            on their own; an utterance's hypothesis joins its pieces' in order, and it is scored whole.
        scoring: how references and hypotheses are normalized alike before scoring (case, punctuation).
        endpoints: decode every input that streams chunk by chunk (``asr.decode.endpointed.resets_apply``)
            as utterances ended at endpoints, each encoded as a fresh stream (``asr.decode.endpointed``);
            its hypothesis joins theirs. None: one stream an input (unless ``pause_endpoints``).
        pause_endpoints: the same inputs' utterances end at the audio's pauses too (``asr.decode.pause_endpoint``;
            alone, or with ``endpoints``: whichever comes first).

    A decoding error (e.g. an input longer than ``abs_learned``'s table) propagates:
    a WER over the utterances that happened to decode would not be comparable with
    one over the whole set. The ablation catches it per measurement.
    """
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ValueError(f"modes ({list(modes)}) must be a non-empty subset of {', '.join(MODES)}.")
    utts = eval_set.utterances
    if not utts:
        raise ValueError(f"no utterances to decode (skipped: {dict(eval_set.skipped) or 'none'})")
    units, owner, cuts = (utts, list(range(len(utts))), None) if segmenter is None else _cut_at_pauses(utts, segmenter)
    unit_hyps = {m: [""] * len(units) for m in modes}  # manifest order, whatever the batching
    endpointed: dict[int, int] = {}  # unit -> utterances its endpoints made
    seconds = dict.fromkeys(modes, 0.0)
    skipped, over_budget, blocked_units = Counter(eval_set.skipped), set(), 0
    batches = duration_batches([u.seconds for u in units], batch_seconds)
    frames = [u.feats.size(0) for u in units]
    bar = None
    if progress:
        from tqdm import tqdm

        # Counted in feature frames (integers: a float total that the summed updates overshoot makes tqdm
        # warn) and shown in seconds of audio, moved as the encoder goes: a long recording shows its way
        # through, and the rate is audio seconds per second (1 / RTF).
        bar = tqdm(total=sum(frames), desc="decoding", unit="s audio", unit_scale=FRAME_SHIFT_S)
    for batch in batches:
        groups, over = ([(batch, False)], []) if memory_budget is None else plan_batch(
            model, frames, batch, chunk_size, left_chunks, memory_budget)
        for i, need in over:
            if owner[i] not in over_budget:
                skipped["over_memory_budget"] += 1
            over_budget.add(owner[i])
            if bar is not None:
                bar.update(frames[i])
            print(f"decode: skipped {units[i].key} ({units[i].seconds:.0f} s): decoding it this way needs about "
                  f"{format_bytes(need)}, over the {format_bytes(memory_budget)} memory budget; decode it with "
                  f"--chunk-size 16 --left-chunks 4 (memory independent of the length), cut it shorter, or raise "
                  f"--memory-budget", file=sys.stderr)
        for planned, forced in groups:
            for group, streamed in _endpoint_parts(model, planned, frames, chunk_size, left_chunks,
                                                   endpoints is not None or pause_endpoints is not None):
                blocked_units += len(group) if forced else 0
                group_biasing = (biasing if biasing is None or isinstance(biasing, Biasing)
                                 else [biasing.get(utts[owner[i]].key) for i in group])
                _decode_group(model, tokenizer, units, group, modes, unit_hyps, seconds, forced, bar, beam=beam,
                              chunk_size=chunk_size, left_chunks=left_chunks, ctc_weight=ctc_weight,
                              reverse_weight=reverse_weight, fusion=fusion, biasing=group_biasing,
                              hotword_rescore_weight=hotword_rescore_weight,
                              endpoints=endpoints, pause_endpoints=pause_endpoints, streamed=streamed,
                              endpointed=endpointed)
    if bar is not None:
        bar.close()
    hyps = {m: [""] * len(utts) for m in modes}
    for m in modes:
        for i, hyp in zip(owner, unit_hyps[m]):  # pieces in order: join their words
            hyps[m][i] = f"{hyps[m][i]} {hyp}".strip() if hyp else hyps[m][i]
    decoded = [i for i in range(len(utts)) if i not in over_budget]
    audio_s = sum(utts[i].seconds for i in decoded)
    rule = endpoint_rule_name(endpoints, pause_endpoints) if endpointed else None
    extra = {} if segmenter is not None else {i: {"endpoint_utterances": n, "endpoint_rule": rule}
                                              for i, n in endpointed.items()}
    results = {}
    for mode in modes:
        timing = {"decode_seconds": seconds[mode], "rtf": seconds[mode] / audio_s if audio_s else float("nan")}
        if not eval_set.references:  # hypotheses only: nothing to score them against
            records = [{"key": utts[i].key, "hyp": hyps[mode][i], "seconds": utts[i].seconds, **extra.get(i, {})}
                       for i in decoded]
            results[mode] = ModeResult(records, {"utterances": len(records), "wer": None, "cer": None, **timing})
            continue
        counter = ErrorCounter(scoring)
        for i in decoded:
            counter.add(utts[i].text, hyps[mode][i], key=utts[i].key, seconds=utts[i].seconds, **extra.get(i, {}))
        results[mode] = ModeResult(counter.records, {**counter.summary(), **timing})
    settings = {"chunk_size": chunk_size, "left_chunks": left_chunks, "beam": beam, "ctc_weight": ctc_weight,
                "reverse_weight": reverse_weight,
                "lm": None if fusion is None else fusion.settings()}
    if eval_set.references:
        settings["scoring"] = scoring.settings()
    if biasing is not None:
        settings["hotwords"] = {"per_utterance": not isinstance(biasing, Biasing),
                                "rescore_weight": hotword_rescore_weight}
    if memory_budget is not None:
        settings["memory"] = {"budget_bytes": memory_budget, "blocked_attention_utterances": blocked_units}
    if endpoints is not None or pause_endpoints is not None:
        settings["endpoints"] = {"rule": endpoint_rule_name(endpoints, pause_endpoints)}
        if endpoints is not None:
            settings["endpoints"].update(blank_threshold=endpoints.blank_threshold, reset=endpoints.reset,
                                         rules=[vars(rule) for rule in endpoints.rules])
        if pause_endpoints is not None:
            settings["endpoints"].update(reset="both", pauses=pause_endpoints.settings())
        settings["endpoints"].update(inputs=len(endpointed), utterances=sum(endpointed.values()))
    if segmenter is not None:
        settings["segments"] = {"min_pause_s": segmenter.min_pause_s, "max_piece_s": segmenter.max_piece_s,
                                "pieces": len(units),
                                "pause_seconds": sum(c.pause_frames for c in cuts) * FRAME_SHIFT_S}
    return SplitResult(results, settings, audio_s, skipped)


def _cut_at_pauses(utts: list[Utterance], segmenter: PauseSegmenter
                   ) -> tuple[list[Utterance], list[int], list[Pieces]]:
    """The pieces of every utterance as utterances of their own (keys ``<key>@<start>-<end>`` in
    frames), the index of the utterance each came from, and how each utterance was cut."""
    units, owner, cuts = [], [], []
    for i, utt in enumerate(utts):
        ranges = segmenter.find(utt.feats)
        cuts.append(Pieces(tuple(ranges), utt.feats.size(0)))
        for start, end in ranges:
            units.append(Utterance(f"{utt.key}@{start}-{end}", utt.text, utt.feats[start:end],
                                   (end - start) * FRAME_SHIFT_S))
            owner.append(i)
    return units, owner, cuts


def _endpoint_parts(model, group: list[int], frames: list[int], chunk_size: int, left_chunks: int,
                    resets: bool) -> list[tuple[list[int], bool]]:
    """``group`` as the parts `_decode_group` takes, each with whether it is decoded through its endpoints:
    with endpoint ``resets``, each input that streams on its own length alone (True) and the others together (False);
    a short input batched beside a long one is decoded as it would be in a batch of its own, not through
    endpoints its padding made."""
    if not resets:
        return [(group, False)]
    streamed = [i for i in group if resets_apply(model.encoder, chunk_size, left_chunks, frames[i])]
    rest = [i for i in group if i not in streamed]
    return [([i], True) for i in streamed] + ([(rest, False)] if rest else [])


def _decode_group(model, tokenizer, utts: list[Utterance], group: list[int], modes: Sequence[str],
                  hyps: dict[str, list[str]], seconds: dict[str, float], forced_blocked: bool, bar, *,
                  chunk_size: int, left_chunks: int, fusion: Fusion | None, biasing,
                  endpoints: EndpointConfig | None, pause_endpoints: PauseRule | None, streamed: bool,
                  endpointed: dict[int, int], **options) -> None:
    """Decode utterances ``group`` with every mode into ``hyps`` (their manifest slots), timing each mode;
    ``forced_blocked``: every attention call takes the blocked path (``blocked.forced()``); the LMs and
    hotwords (``biasing``) go to the modes that take them (``FUSED_MODES``); ``bar``: a progress bar counting
    feature frames (or None).

    The group is encoded once for all modes (as ``decode_batch`` would each time); every mode's time
    counts the encoder, so its RTF is the one it has alone. ``streamed``: the group is one input that streams
    (`_endpoint_parts`), decoded utterance by utterance (``asr.decode.endpointed``) as ``endpoints`` and
    ``pause_endpoints`` end them; ``endpointed`` counts them by unit.
    """
    from asr.model.scorers import blocked

    advance = None if bar is None else bar.update

    def search(enc_out, enc_lens, mode):
        """One mode's search; the LMs and hotwords go to the modes that take them."""
        fused = mode in FUSED_MODES
        return search_encoded(model, enc_out, enc_lens, mode, fusion=fusion if fused else None,
                              biasing=biasing if fused else None, **options)

    if streamed:
        (i,) = group
        tokens, spent, endpointed[i] = search_utterances(model, utts[i].feats, modes, search, chunk_size,
                                                         left_chunks, endpoints, time.perf_counter, advance,
                                                         pauses=pause_endpoints)
        for mode in modes:
            seconds[mode] += spent[mode]
            hyps[mode][i] = " ".join(filter(None, map(tokenizer.decode, tokens[mode])))
        return
    # One utterance (as every long one is) as it is: padding copies it.
    feats = (utts[group[0]].feats[None] if len(group) == 1 else
             torch.nn.utils.rnn.pad_sequence([utts[i].feats for i in group], batch_first=True))  # (B, T, F)
    lens = torch.tensor([utts[i].feats.size(0) for i in group])  # (B,)
    with blocked.forced() if forced_blocked else contextlib.nullcontext():
        start = time.perf_counter()
        enc_out, enc_lens = encode_batch(model, feats, lens, chunk_size, left_chunks, advance)  # (B, T', D)
        encoding = time.perf_counter() - start
        for mode in modes:
            if bar is not None:
                bar.set_postfix_str(mode)
            start = time.perf_counter()
            ids = search(enc_out, enc_lens, mode)
            seconds[mode] += encoding + time.perf_counter() - start
            for i, hyp in zip(group, ids):
                hyps[mode][i] = tokenizer.decode(hyp)
