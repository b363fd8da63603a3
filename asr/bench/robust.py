"""The robustness benchmark: WER against SNR per kind of background, sentences alone and in live sessions.

Conditions (:func:`conditions`): ``clean``, then every additive kind of
:mod:`asr.bench.backgrounds` (babble, music, white, pink) at each SNR of ``snrs_db``, and
``reverb`` at each reverberation time of ``rt60s_s``. The backgrounds are the benchmark's own,
made apart from every training generator (see that module).

* **Alone**: the first ``utterances`` usable sentences of ``cuts``, each mixed with its
  background and decoded offline (``asr.evaluation.split``) as the server decodes: chunk
  ``chunk_size`` with ``left_chunks`` of memory, ``mode``. An utterance's background is drawn
  once (seeded by seed, kind, utterance) and only scaled between SNRs, so the SNR curve of a
  kind is paired; a room is drawn once per utterance and only its reverberation time changes.
  Each condition gets a bootstrap interval (``asr.ablation.stats.wer_interval``), a paired
  one for its difference from clean, and its word errors split into substitutions, deletions
  and insertions (``asr.decode.word_ops``).
* **Sessions** (``sessions`` > 0): ``sessions`` of ``sentences`` each through the server
  (``asr.bench.live``: a child process on 127.0.0.1, its defaults unless ``server_args`` say
  otherwise, the Silero VAD among them), the background under the whole session at the SNR
  against the session's mean speech power; each sentence also alone on its own connection over
  the same background. Reported per condition: session and alone WER and their paired
  difference (interval), finals per session, fused gaps, words inserted (hypothesis
  words the minimum-edit alignment to the references leaves over: what the background made
  the recognizer say), and the errors of each session's first sentence, session and alone (the
  stream meets it after the lead-in's background from its start, every later one after an
  endpoint: the two ask different things of the runtime). ``clean`` and ``reverb`` sessions lie
  over a uniform white floor at ``FLOOR_DBFS``.

With ``lm_args`` (the decoding scripts' ``--lm`` / ``--word-lm`` options) both parts decode with the LM: it
is fused into the sentences alone and passed to the server.

Deterministic for a seed; :func:`format_tables` prints the tables, the report is plain JSON.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from asr.ablation.stats import paired_difference, wer_interval
from asr.bench.backgrounds import (ADDITIVE_KINDS, KINDS, additive, at_snr, reverberate, room_impulse,
                                   speech_power, white)
from asr.bench.live import SERVER_START_S, LiveConfig, ServerStartError, run_sessions, serve_process
from asr.bench.live_score import Word, align
from asr.bench.live_sessions import ALONE_LEAD_S, ALONE_TAIL_S, Sentence, Timing, load_sentences, plan_sessions
from asr.data.features import SAMPLE_RATE
from asr.decode.batch import MODES
from asr.decode.options import DEFAULT_CHUNK_SIZE, DEFAULT_LEFT_CHUNKS
from asr.decode.word_ops import OP_NAMES
from asr.lm.options import fusion_from_args, lm_options

SNRS_DB = (20.0, 10.0, 5.0)
RT60S_S = (0.3, 0.6, 0.9)
FLOOR_DBFS = -70.0
_PAD_S = max(ALONE_LEAD_S, ALONE_TAIL_S)  # background beyond each end of a session (live_sessions' pad)


@dataclass(frozen=True)
class Condition:
    """One row: a kind of background (``clean``, an additive kind or ``reverb``) at a level: an SNR in dB
    for additive kinds, a reverberation time in seconds for ``reverb``, None for clean."""

    kind: str
    level: float | None = None

    @property
    def name(self) -> str:
        if self.kind == "clean":
            return "clean"
        return f"{self.kind}@{self.level:g}{'s' if self.kind == 'reverb' else 'dB'}"


def conditions(kinds: tuple[str, ...], snrs_db: tuple[float, ...], rt60s_s: tuple[float, ...]) -> list[Condition]:
    """``clean``, then every kind of ``kinds`` at each of its levels."""
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise ValueError(f"unknown background kind(s) {bad}; valid: {', '.join(KINDS)}")
    out = [Condition("clean")]
    for kind in kinds:
        out += [Condition(kind, float(level)) for level in (rt60s_s if kind == "reverb" else snrs_db)]
    return out


@dataclass(frozen=True)
class RobustConfig:
    """What to run (see the module docstring). ``server_args``: extra ``scripts/serve.py`` arguments.
    ``lm_args``: the decoding scripts' LM options (``asr.lm.options.add_lm_arguments``: ``--lm``, ``--word-lm``
    and their weights), fused into the sentences alone and passed to the server, so every row reads with the
    LM; empty: none."""

    checkpoint: str
    cuts: str
    data_dir: str | None = None
    kinds: tuple[str, ...] = KINDS
    snrs_db: tuple[float, ...] = SNRS_DB
    rt60s_s: tuple[float, ...] = RT60S_S
    utterances: int = 60
    sessions: int = 12
    sentences: int = 5
    seed: int = 0
    mode: str = "attention_rescoring"
    chunk_size: int = DEFAULT_CHUNK_SIZE
    left_chunks: int = DEFAULT_LEFT_CHUNKS
    timing: Timing = field(default_factory=Timing)
    speed: float = 0.0
    concurrency: int = 4
    server_args: tuple[str, ...] = ()
    max_seconds: float = 3600.0
    replicates: int = 1000
    server_start_s: float = SERVER_START_S
    lm_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        conditions(self.kinds, self.snrs_db, self.rt60s_s)
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.utterances < 1 or self.sessions < 0 or self.sentences < 1:
            raise ValueError(f"utterances ({self.utterances}) and sentences ({self.sentences}) must be >= 1, "
                             f"sessions ({self.sessions}) >= 0")
        if self.server_start_s <= 0:
            raise ValueError(f"server_start_s ({self.server_start_s}) must be > 0")
        lm_options(self.lm_args)  # a misspelt option fails here, before minutes of decoding

    @property
    def served_args(self) -> tuple[str, ...]:
        """The server's extra arguments: ``server_args``, then ``lm_args``."""
        return self.server_args + self.lm_args


def _rng(seed: int, kind: str, index: int) -> np.random.Generator:
    return np.random.default_rng([seed, KINDS.index(kind) if kind in KINDS else len(KINDS), index])


def mixed(audio: np.ndarray, condition: Condition, seed: int, index: int) -> np.ndarray:
    """(n,) sentence ``index``'s float64 ``audio`` under ``condition`` (clean: unchanged)."""
    if condition.kind == "clean":
        return audio
    rng = _rng(seed, condition.kind, index)
    if condition.kind == "reverb":
        return reverberate(audio, room_impulse(condition.level, rng))
    return audio + at_snr(additive(condition.kind, audio.size, rng), speech_power(audio), condition.level)


def _bootstrap(errors: list[int], words: list[int], base: list[int] | None, replicates: int, seed: int) -> dict:
    interval = wer_interval(errors, words, replicates=replicates, seed=seed)
    out = {"wer": interval.value, "low": interval.low, "high": interval.high, "errors": sum(errors),
           "words": sum(words)}
    if base is not None:
        diff = paired_difference(errors, base, words, replicates=replicates, seed=seed)
        out["vs_clean"] = {"difference": diff.difference, "low": diff.low, "high": diff.high}
    return out


def run_alone(config: RobustConfig, sentences: list[Sentence], rows: list[Condition], model, tokenizer,
              features, progress=None, fusion=None) -> dict:
    """Every condition's WER over ``sentences`` decoded offline, with intervals (see the module docstring);
    ``fusion``: the LM (``asr.lm.Fusion``) of the decoding, or None."""
    from asr.data.features import FbankExtractor
    from asr.evaluation.split import EvalSet, Utterance, evaluate_utterances

    extractor = FbankExtractor(features)
    out, clean_errors = {}, None
    for condition in rows:
        utts = []
        for i, sentence in enumerate(sentences):
            audio = torch.from_numpy(mixed(sentence.audio, condition, config.seed, i)).float()
            utts.append(Utterance(sentence.cut_id, sentence.text, extractor(audio), audio.numel() / SAMPLE_RATE))
        result = evaluate_utterances(model, tokenizer, EvalSet(utts), [config.mode], chunk_size=config.chunk_size,
                                     left_chunks=config.left_chunks, fusion=fusion)
        records = result.modes[config.mode].records
        errors, words = [r["word_errors"] for r in records], [r["ref_words"] for r in records]
        out[condition.name] = _bootstrap(errors, words, clean_errors, config.replicates, config.seed)
        # what a background adds: misread words, dropped ones, or its own words inserted
        out[condition.name].update({k: sum(r[k] for r in records) for k in OP_NAMES})
        if condition.kind == "clean":
            clean_errors = errors
        if progress is not None:
            progress(condition.name)
    return out


def _session_background(plan, condition: Condition, seed: int) -> np.ndarray:
    """(pad + plan.samples + pad,) the session's background: the kind at the SNR against the session's mean
    speech power, or the white floor."""
    n = plan.samples + 2 * int(_PAD_S * SAMPLE_RATE)
    rng = _rng(seed, condition.kind, 10_000 + plan.index)
    if condition.kind not in ADDITIVE_KINDS:
        return white(n, rng) * 10.0 ** (FLOOR_DBFS / 20.0)
    power = float(np.mean([speech_power(p.sentence.audio) for p in plan.placed]))
    return at_snr(additive(condition.kind, n, rng), power, condition.level)


def _sentence_errors(refs: list[str], texts: list[str], spans: list[tuple[float, float]]) -> tuple[list[int], int]:
    """Per reference sentence, the errors of the texts' words aligned to it; and the words inserted."""
    words = [Word(w) for text in texts for w in text.split()]
    alignment = align(refs, spans, words)
    substituted_or_deleted = sum(op != "ok" for op in alignment.ops)
    return list(alignment.sentence_errors), alignment.errors - substituted_or_deleted


def finals_per_session(details: list[dict], worded: bool = False) -> float | None:
    """Finals the server sent a session (``details``: run_sessions' per-session records), or only those
    with words: an endpoint in talk that the VAD's segment end then follows sends an empty final (as
    Wenet's server does), and the finals with words are the sentences a user sees. None: no session."""
    if not details:
        return None
    return sum(bool(f["text"].strip()) or not worded for d in details for f in d["finals"]) / len(details)


def run_sessions_per_condition(config: RobustConfig, sentences: list[Sentence], rows: list[Condition],
                               log=print) -> dict:
    """Every condition's live sessions through one server (see the module docstring)."""
    live = LiveConfig(checkpoint=config.checkpoint, cuts=config.cuts, sessions=config.sessions,
                      sentences=config.sentences, backgrounds=("zeros",), seed=config.seed, timing=config.timing,
                      speed=config.speed, concurrency=config.concurrency, max_seconds=config.max_seconds,
                      server_args=config.served_args)
    need = config.sessions * config.sentences
    deadline = time.monotonic() + config.max_seconds
    out: dict = {}
    longest = 0.0
    plans_of = {}
    for condition in rows:
        used = sentences[:need]
        if condition.kind == "reverb":
            used = [Sentence(s.cut_id, s.text, mixed(s.audio, condition, config.seed, i)) for i, s in enumerate(used)]
        plans_of[condition] = plan_sessions(used, config.sessions, config.sentences, config.seed, config.timing)
        longest = max(longest, max(p.samples for p in plans_of[condition]) / SAMPLE_RATE)
    with serve_process(config.checkpoint, config.served_args, config.concurrency + 1, longest + 10.0,
                       config.server_start_s) as uri:
        for condition in rows:
            if time.monotonic() >= deadline:
                out[condition.name] = {"not_run": f"max_seconds ({config.max_seconds:g}) spent"}
                continue
            plans = plans_of[condition]
            summary, details = run_sessions(uri, condition.name, plans, live, deadline,
                                            background_of=lambda plan, c=condition: _session_background(
                                                plan, c, config.seed))
            session_errors, alone_errors, words, inserted, alone_inserted = [], [], [], 0, 0
            firsts = []  # where each session's first sentence lies in the per-sentence lists
            for d in details:
                firsts.append(len(words))
                errs, ins = _sentence_errors(d["refs"], [f["text"] for f in d["finals"]], d["speech_s"])
                session_errors += errs
                inserted += ins
                for ref, text, span in zip(d["refs"], d["alone"], d["speech_s"]):
                    errs, ins = _sentence_errors([ref], [text], [span])
                    alone_errors += errs
                    alone_inserted += ins
                words += [len(r.split()) for r in d["refs"]]
            first = {name: sum(counts[i] for i in firsts) for name, counts in
                     (("session_errors", session_errors), ("alone_errors", alone_errors), ("words", words))}
            row = {"sessions": summary["sessions"], "failed_sessions": summary["failed_sessions"],
                   "finals_per_session": finals_per_session(details),
                   "worded_finals_per_session": finals_per_session(details, worded=True),
                   "gaps": summary["gaps"], "gaps_fused": summary["gaps_fused"], "gaps_late": summary["gaps_late"],
                   "inserted_words": inserted, "alone_inserted_words": alone_inserted, "first_sentence": first,
                   # what the server sent each session (finals with their times) beside its references and the
                   # sentences alone: where a background's cost lies is read from these
                   "details": details}
            if words:
                row["session"] = _bootstrap(session_errors, words, None, config.replicates, config.seed)
                row["alone"] = _bootstrap(alone_errors, words, None, config.replicates, config.seed)
                diff = paired_difference(session_errors, alone_errors, words, replicates=config.replicates,
                                         seed=config.seed)
                row["difference"] = {"difference": diff.difference, "low": diff.low, "high": diff.high}
            out[condition.name] = row
            log(f"sessions {condition.name}: {row['sessions']} sessions"
                + (f"; failed: {row['failed_sessions']}" if row["failed_sessions"] else ""))
    return out


def run_robust(config: RobustConfig, log=print) -> dict:
    """Run the benchmark; returns the report (:func:`format_tables` prints it)."""
    from tqdm import tqdm

    from asr.data.features import FeatureConfig
    from asr.train.checkpoint import load_model

    started = time.monotonic()
    rows = conditions(config.kinds, config.snrs_db, config.rt60s_s)
    need = max(config.utterances, config.sessions * config.sentences)
    sentences, skipped = load_sentences(config.cuts, need, config.data_dir)
    if len(sentences) < need:
        raise ValueError(f"{config.cuts} holds {len(sentences)} usable sentences; the benchmark needs {need} "
                         f"(skipped: {dict(skipped) or 'none'})")
    model, tokenizer, cfg = load_model(config.checkpoint)
    fusion = fusion_from_args(lm_options(config.lm_args), tokenizer)
    features = FeatureConfig.from_dict(cfg.features)
    report = {"config": {**asdict(config), "timing": asdict(config.timing)}, "skipped_cuts": dict(skipped),
              "conditions": [c.name for c in rows]}
    with tqdm(total=len(rows), desc="alone", unit="condition") as bar:
        report["alone"] = run_alone(config, sentences[: config.utterances], rows, model, tokenizer, features,
                                    progress=lambda name: bar.update(1), fusion=fusion)
    report["alone_seconds"] = time.monotonic() - started
    if config.sessions:
        try:
            report["sessions"] = run_sessions_per_condition(config, sentences, rows, log)
        except ServerStartError as err:
            # the sentences alone (often most of the run's time) stay in the report; every session row says why
            log(f"sessions not run: {err}")
            report["sessions"] = {c.name: {"not_run": str(err)} for c in rows}
    report["wall_s"] = time.monotonic() - started
    return report


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}"


def _finals(x: float | None) -> str:
    """Finals a session, or '-' in a report written before the count existed."""
    return "-" if x is None else f"{x:.2f}"


def _interval(b: dict) -> str:
    return f"{_pct(b['wer'])} [{_pct(b['low'])}, {_pct(b['high'])}]"


def _diff(d: dict) -> str:
    return f"{100 * d['difference']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"


def format_tables(report: dict) -> str:
    """The report as Markdown: sentences alone per condition, then live sessions per condition."""
    lm_args = report["config"].get("lm_args") or ()
    with_lm = f" with the LM ({' '.join(lm_args)})" if lm_args else ""
    lines = [f"Sentences alone (offline, the server's chunking){with_lm}:", "",
             "| condition | WER % [95% CI] | vs clean, points [95% CI] | word errors: sub / del / ins |",
             "|---|---|---|---|"]
    for name in report["conditions"]:
        b = report["alone"][name]
        ops = " / ".join(str(b[k]) for k in OP_NAMES) if all(k in b for k in OP_NAMES) else "-"
        lines.append(f"| {name} | {_interval(b)} | {_diff(b['vs_clean']) if 'vs_clean' in b else '-'} | {ops} |")
    sessions = report.get("sessions")
    if sessions:
        per = report["config"]["sentences"]
        lines += ["", f"Live sessions through the server ({per} sentences each){with_lm}:", "",
                  "| condition | sessions | session WER % | alone WER % | session - alone [95% CI] | "
                  f"finals / session ({per} sentences; with words) | fused gaps | inserted words: session / alone | "
                  "first sentences' errors: session / alone (words) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for name in report["conditions"]:
            s = sessions.get(name, {"not_run": "missing"})
            if "not_run" in s or "session" not in s:
                # the reason may quote the server's stderr (its usage line has '|'): one table cell
                reason = " ".join(str(s.get("not_run", s.get("failed_sessions"))).split()).replace("|", "\\|")
                lines.append(f"| {name} | not run: {reason} |" + " |" * 7)
                continue
            finals = f"{s['finals_per_session']:.2f}; {_finals(s.get('worded_finals_per_session'))}"
            lines.append(f"| {name} | {s['sessions']} | {_interval(s['session'])} | {_interval(s['alone'])} | "
                         f"{_diff(s['difference'])} | {finals} | {s['gaps_fused']}/{s['gaps']} | "
                         f"{s['inserted_words']} / {s['alone_inserted_words']} | "
                         f"{_first_sentences(s.get('first_sentence'))} |")
    return "\n".join(lines)


def _first_sentences(first: dict | None) -> str:
    """Errors of the sessions' first sentences, in the session and alone, or '-' in a report written before."""
    return "-" if first is None else f"{first['session_errors']} / {first['alone_errors']} ({first['words']})"


def summary_row(report: dict) -> dict:
    """What the quickstart's summary shows: clean, babble and music at 20 and 10 dB alone, and the worst
    session-minus-alone difference (None where not measured)."""
    alone = report.get("alone", {})
    pick = {name: alone[name]["wer"] for name in ("clean", "babble@20dB", "babble@10dB", "music@20dB", "music@10dB")
            if name in alone}
    sessions = report.get("sessions") or {}
    diffs = [s["difference"]["difference"] for s in sessions.values() if "difference" in s]
    return {**pick, "worst_session_difference": max(diffs) if diffs else None}

