"""Importers from common corpus layouts into Lhotse CutSets (one supervision per cut).

Wenet `data.list`, Kaldi data dirs, NeMo JSON manifests, and LibriSpeech /
AISHELL-1 from an existing local copy; nothing is downloaded. Audio headers are
read once (soundfile.info) for durations. Entries that cannot be used (missing or
unreadable audio, missing transcript, malformed line, piped wav.scp command) are
skipped with a warning and counted in the `skipped` Counter passed in.

Segments (Kaldi `segments`, Wenet `start`/`end`) are cut offsets into their recording,
in whole samples as Wenet and Kaldi read them: every consumer (decode, prepare, train)
loads only that span (`asr.data.audio.cut_waveform`).
"""

from __future__ import annotations

import gzip
import json
import logging
from collections import Counter
from pathlib import Path

import soundfile as sf
from lhotse import AudioSource, CutSet, MonoCut, Recording, SupervisionSegment

from asr.data.text import squeeze_spaces

log = logging.getLogger(__name__)


def _skip(skipped: Counter | None, reason: str, detail: str) -> None:
    log.warning("import: skipping %s", detail)
    if skipped is not None:
        skipped[reason] += 1


def make_recording(rec_id: str, path: str | Path, skipped: Counter | None = None) -> Recording | None:
    """A Recording from an audio file's header; None (counted) when it is missing, unreadable or empty."""
    path = Path(path)
    if not path.is_file():
        _skip(skipped, "audio_missing", f"{rec_id}: no file {path}")
        return None
    try:
        info = sf.info(str(path))
    except sf.SoundFileError as err:  # a bad file; anything else is a bug and propagates
        _skip(skipped, "audio_corrupt", f"{rec_id}: unreadable {path} ({str(err).splitlines()[0]})")
        return None
    if info.frames == 0:
        _skip(skipped, "audio_empty", f"{rec_id}: empty {path}")
        return None
    return Recording(
        id=rec_id, sources=[AudioSource(type="file", channels=list(range(info.channels)), source=str(path.resolve()))],
        sampling_rate=info.samplerate, num_samples=info.frames, duration=info.frames / info.samplerate,
    )


def make_cut(
    cut_id: str, rec: Recording, text: str | None, start: float = 0.0, duration: float | None = None,
    speaker: str | None = None, language: str | None = None,
) -> MonoCut:
    """One cut over [start, start + duration) of `rec` with a single supervision covering it
    (text None: audio without a reference)."""
    duration = rec.duration - start if duration is None else min(duration, rec.duration - start)
    sup = SupervisionSegment(
        id=cut_id, recording_id=rec.id, start=0.0, duration=duration, channel=0, text=text,
        speaker=speaker, language=language,
    )
    return MonoCut(id=cut_id, start=start, duration=duration, channel=0, recording=rec, supervisions=[sup])


# Kaldi's extract-segments keeps a segment whose end overshoots its recording by up to 0.5 s (its
# --max-overshoot) and ends it with the recording; an end further out names audio that is not there.
MAX_OVERSHOOT_S = 0.5


def segment_cut(
    cut_id: str, rec: Recording, text: str | None, start: float, end: float | None,
    skipped: Counter | None = None, speaker: str | None = None,
) -> MonoCut | None:
    """The cut over [start, end) seconds of ``rec`` (end None: to the recording's end).

    The times become whole samples as Wenet's reader and Kaldi's extract-segments take them
    (``int(t * rate)``), so the cut holds exactly the samples they read. A segment that starts
    before 0 or at/after the recording's end, ends at or before its start, or ends more than
    :data:`MAX_OVERSHOOT_S` past the recording is skipped and counted (``bad_segment``); a smaller
    overshoot ends at the recording's end, as Wenet and Kaldi read it."""
    rate = rec.sampling_rate
    first = int(start * rate)
    last = rec.num_samples if end is None else min(int(end * rate), rec.num_samples)
    problem = None
    if start < 0 or first >= rec.num_samples:
        problem = "starts outside"
    elif end is not None and end - rec.duration > MAX_OVERSHOOT_S:
        problem = f"ends more than {MAX_OVERSHOOT_S} s past the end of"
    elif last <= first:
        problem = "is empty (end <= start) in"
    if problem is not None:
        span = f"[{start}, {'end' if end is None else end})"
        _skip(skipped, "bad_segment", f"segment {cut_id} {span} {problem} {rec.id} ({rec.duration:.2f} s)")
        return None
    return make_cut(cut_id, rec, text, first / rate, (last - first) / rate, speaker)


def _wenet_span(entry: dict) -> tuple[float, float | None]:
    """(start, end) seconds of a data.list entry: Wenet reads `start` and `end` together; neither: the whole file."""
    if "start" not in entry and "end" not in entry:
        return 0.0, None
    if "start" not in entry or "end" not in entry:
        raise KeyError("start and end come together (Wenet reads both)")
    start, end = entry["start"], entry["end"]
    if isinstance(start, bool) or isinstance(end, bool) or not all(isinstance(t, (int, float)) for t in (start, end)):
        raise TypeError(f"start and end must be numbers of seconds, got {start!r} and {end!r}")
    return float(start), float(end)


class CorpusFormatError(ValueError):
    """A source in a layout no importer reads; the message is one line and says what to give instead."""


def first_line(path: Path) -> str | None:
    """The first non-empty line of a (gzipped) text file, stripped; None when there is none or it is not text."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    return line.strip()
    except (OSError, UnicodeDecodeError, EOFError):
        return None
    return None


def is_shard_list(path: Path) -> bool:
    """A Wenet shard list (``data_type: shard``): one tar archive path or URL a line."""
    line = first_line(path)
    return line is not None and line.split("?")[0].endswith((".tar", ".tar.gz", ".tgz"))


def shard_list_message(path: Path) -> str:
    return (f"{path}: a Wenet shard list (tar archives, data_type shard), which is not read here: give a raw "
            "data.list of the same audio (JSON lines key/wav/txt, optional start/end; Wenet's tools/make_raw_list.py "
            "writes one) or the audio files")


def import_wenet(data_list: str | Path, skipped: Counter | None = None, require_text: bool = True) -> CutSet:
    """Wenet `data.list`: JSON lines with `key`, `wav`, `txt` and, for a segment of the file, `start` and
    `end` in seconds (:func:`segment_cut`); relative wav paths are taken from the list's folder.

    require_text=False (audio to decode without references): `txt` may be absent (the cut then has no text)."""
    data_list = Path(data_list)
    if is_shard_list(data_list):
        raise CorpusFormatError(shard_list_message(data_list))
    cuts = []
    for line_no, line in enumerate(data_list.read_text("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            key, wav = entry["key"], entry["wav"]
            txt = entry["txt"] if require_text else entry.get("txt")
            start, end = _wenet_span(entry)
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            _skip(skipped, "bad_manifest_line", f"{data_list}:{line_no}: {err!r}")
            continue
        rec = make_recording(key, _resolve(wav, data_list.parent), skipped)
        if rec is None:
            continue
        text = None if txt is None else squeeze_spaces(txt)
        cut = make_cut(key, rec, text) if end is None else segment_cut(key, rec, text, start, end, skipped)
        if cut is not None:
            cuts.append(cut)
    return CutSet.from_cuts(cuts)


def read_table(path: Path) -> dict[str, str]:
    """Kaldi `key value...` table."""
    table = {}
    for line in path.read_text("utf-8").splitlines():
        key, _, value = line.strip().partition(" ")
        if key:
            table[key] = value.strip()
    return table


def import_kaldi(data_dir: str | Path, skipped: Counter | None = None) -> CutSet:
    """Kaldi data dir: `wav.scp` and `text`, optional `segments` and `utt2spk`."""
    data_dir = Path(data_dir)
    for required in ("wav.scp", "text"):
        if not (data_dir / required).is_file():
            raise FileNotFoundError(f"Kaldi data dir {data_dir} lacks {required}")
    return kaldi_cuts(data_dir / "wav.scp", read_table(data_dir / "text"), skipped)


def kaldi_cuts(wav_scp: Path, texts: dict[str, str] | None, skipped: Counter | None = None) -> CutSet:
    """The cuts of a `wav.scp` (relative paths from its folder) with the `segments` and `utt2spk`
    beside it; `texts` (utterance -> transcript): an utterance without one is skipped and counted;
    None: no references, every utterance is kept without text."""
    data_dir = wav_scp.parent
    wav_table = read_table(wav_scp)
    utt2spk = read_table(data_dir / "utt2spk") if (data_dir / "utt2spk").is_file() else {}
    recordings: dict[str, Recording | None] = {}
    for rec_id, value in wav_table.items():
        if value.endswith("|"):
            _skip(skipped, "unsupported_wav_command", f"{rec_id}: piped wav.scp command {value!r}")
            recordings[rec_id] = None
        else:
            recordings[rec_id] = make_recording(rec_id, _resolve(value, data_dir), skipped)
    # without segments every recording is one utterance with the same id
    if (data_dir / "segments").is_file():
        segments = {}
        for utt, value in read_table(data_dir / "segments").items():
            parts = value.split()
            try:
                segments[utt] = (parts[0], float(parts[1]), float(parts[2]))
            except (IndexError, ValueError):
                _skip(skipped, "bad_manifest_line", f"segments entry {utt!r}: {value!r}")
    else:
        segments = {utt: (utt, 0.0, -1.0) for utt in wav_table}
    cuts = []
    for utt, (rec_id, start, end) in segments.items():
        rec = recordings.get(rec_id)
        if rec_id not in recordings:
            _skip(skipped, "audio_missing", f"{utt}: recording {rec_id!r} not in wav.scp")
            continue
        if rec is None:
            continue  # already counted when the recording was read
        if texts is not None and utt not in texts:
            _skip(skipped, "no_transcript", f"{utt}: not in text")
            continue
        # the segments columns are start and end times (end -1: to the end of the recording), not a duration
        text = None if texts is None else squeeze_spaces(texts[utt])
        cut = segment_cut(utt, rec, text, start, None if end < 0 else end, skipped, utt2spk.get(utt))
        if cut is not None:
            cuts.append(cut)
    return CutSet.from_cuts(cuts)


def import_nemo(manifest: str | Path, skipped: Counter | None = None, require_text: bool = True) -> CutSet:
    """NeMo manifest: JSON lines with `audio_filepath`, `duration`, `text`, optional `offset`.

    require_text=False (audio to decode without references): `text` may be absent (the cut then has no text)."""
    manifest = Path(manifest)
    cuts, seen = [], Counter()
    for line_no, line in enumerate(manifest.read_text("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            path = entry["audio_filepath"]
            text = entry["text"] if require_text else entry.get("text")
            duration, offset = float(entry["duration"]), float(entry.get("offset", 0.0))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            _skip(skipped, "bad_manifest_line", f"{manifest}:{line_no}: {err!r}")
            continue
        stem = Path(path).stem
        # one file can hold several utterances (offsets), so ids get a running suffix
        cut_id = stem if not seen[stem] else f"{stem}-{seen[stem]}"
        seen[stem] += 1
        rec = make_recording(stem, _resolve(path, manifest.parent), skipped)
        if rec is not None:
            cuts.append(make_cut(cut_id, rec, None if text is None else squeeze_spaces(text), offset, duration))
    return CutSet.from_cuts(cuts)


def import_librispeech(root: str | Path, skipped: Counter | None = None) -> dict[str, CutSet]:
    """LibriSpeech layout `<split>/<spk>/<chapter>/<spk>-<chapter>.trans.txt` + flac; one CutSet per split folder."""
    root = Path(root)
    splits: dict[str, CutSet] = {}
    for split_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        cuts = []
        for trans in sorted(split_dir.glob("*/*/*.trans.txt")):
            speaker = trans.parent.parent.name
            for utt, text in read_table(trans).items():
                rec = make_recording(utt, trans.parent / f"{utt}.flac", skipped)
                if rec is not None:
                    cuts.append(make_cut(utt, rec, squeeze_spaces(text), speaker=speaker, language="en"))
        if cuts:
            splits[split_dir.name] = CutSet.from_cuts(cuts)
    if not splits:
        raise FileNotFoundError(f"no LibriSpeech split folders with *.trans.txt under {root}")
    return splits


def import_aishell(root: str | Path, skipped: Counter | None = None) -> dict[str, CutSet]:
    """AISHELL-1 layout: `transcript/aishell_transcript_v0.8.txt` + `wav/<split>/<spk>/*.wav`.

    The transcript's word segmentation spaces are removed (character-level text, as
    Wenet and ESPnet recipes do); wavs without a transcript are counted, not kept.
    """
    root = Path(root)
    trans_file = root / "transcript" / "aishell_transcript_v0.8.txt"
    if not trans_file.is_file():
        raise FileNotFoundError(f"AISHELL-1 transcript not found: {trans_file}")
    texts = {k: "".join(v.split()) for k, v in read_table(trans_file).items()}
    splits: dict[str, CutSet] = {}
    for split_dir in sorted(p for p in (root / "wav").iterdir() if p.is_dir()):
        cuts = []
        for wav in sorted(split_dir.glob("*/*.wav")):
            utt = wav.stem
            if utt not in texts:
                _skip(skipped, "no_transcript", f"{utt}: not in {trans_file.name}")
                continue
            rec = make_recording(utt, wav, skipped)
            if rec is not None:
                cuts.append(make_cut(utt, rec, texts[utt], speaker=wav.parent.name, language="zh"))
        if cuts:
            splits[split_dir.name] = CutSet.from_cuts(cuts)
    return splits


def _resolve(path: str, base: Path) -> Path:
    p = Path(path)
    return p if p.is_absolute() else base / p


IMPORTERS = {
    "wenet": import_wenet, "kaldi": import_kaldi, "nemo": import_nemo,
    "librispeech": import_librispeech, "aishell": import_aishell,
}
