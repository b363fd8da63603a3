"""Audio to decode from whatever a user has, as a Lhotse CutSet: no training corpus needed.

A source is one of (:data:`KINDS`, told apart by name and content, never by a flag):

- ``audio``: audio files, or a folder searched recursively for :data:`AUDIO_SUFFIXES` (what
  soundfile reads); the key of a file is its path under the folder without the suffix;
- ``wenet``: a Wenet ``data.list`` (JSON lines ``key``, ``wav``, ``txt``);
- ``kaldi``: a ``wav.scp`` file, or a Kaldi data folder holding one, with the ``text``,
  ``segments`` and ``utt2spk`` beside it when they are there;
- ``nemo``: a NeMo manifest (JSON lines ``audio_filepath``, ``duration``, ``text``, ``offset``);
- ``lhotse``: a Lhotse cut manifest (``*.jsonl.gz`` / ``*.jsonl`` of cuts), relative audio
  paths resolved against its own folder.

References are optional: a ``text`` field (or line) where the format has one, or a Kaldi-style
``text`` file (``key transcript``) given for any source. :attr:`Inputs.references` is True when
every cut kept has one; where some do and some do not, the ones without are skipped and counted
(``no_transcript``), so a WER is over a stated set. Relative audio paths resolve against the
folder of the file that names them. An entry that cannot be used (a missing or unreadable audio
file, a malformed line, a piped ``wav.scp`` command, a repeated key) is skipped and counted by
reason in :attr:`Inputs.skipped`; a source that does not exist or whose kind cannot be told is
an :class:`InputError` with a one-line message.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lhotse import CutSet

from asr.data.importers import (first_line, import_nemo, import_wenet, is_shard_list, kaldi_cuts, make_cut,
                                make_recording, read_table, shard_list_message)
from asr.data.text import squeeze_spaces

AUDIO_SUFFIXES = (".wav", ".flac", ".mp3", ".ogg", ".opus")
KINDS = ("audio", "wenet", "kaldi", "nemo", "lhotse")


class InputError(ValueError):
    """A source that does not exist or is none of :data:`KINDS`; the message is one line."""


@dataclass
class Inputs:
    """The cuts of every source, in order; ``references``: every cut has a reference text;
    ``kinds``: the kind of each source; ``skipped``: entries left out, by reason."""

    cuts: CutSet
    references: bool
    kinds: list[str]
    skipped: Counter = field(default_factory=Counter)


def _first_json(path: Path) -> dict | None:
    """The first non-empty line of a (gzipped) text file as a JSON object, else None."""
    line = first_line(path)
    try:
        value = None if line is None else json.loads(line)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def detect_kind(path: str | Path) -> str:
    """Which of :data:`KINDS` ``path`` is; :class:`InputError` when it does not exist or cannot be told."""
    path = Path(path)
    if path.is_dir():
        return "kaldi" if (path / "wav.scp").is_file() else "audio"
    if not path.is_file():
        raise InputError(f"{path}: no such file or folder")
    if path.suffix.lower() in AUDIO_SUFFIXES:
        return "audio"
    if path.name == "wav.scp" or path.suffix == ".scp":
        return "kaldi"
    first = _first_json(path)
    if first is not None:
        if {"key", "wav"} <= set(first):
            return "wenet"
        if "audio_filepath" in first:
            return "nemo"
        if "id" in first and ("recording" in first or "start" in first):
            return "lhotse"
    if is_shard_list(path):
        raise InputError(shard_list_message(path))
    raise InputError(f"{path}: cannot tell what it is: expected audio ({'/'.join(s[1:] for s in AUDIO_SUFFIXES)}) "
                     "or a folder of it, a Wenet data.list (JSON lines key/wav/txt), a Kaldi wav.scp, a NeMo "
                     "manifest (JSON lines audio_filepath/duration/text) or a Lhotse cut manifest")


def audio_files(folder: Path) -> list[Path]:
    """Every audio file under ``folder`` (recursively), sorted by path."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in AUDIO_SUFFIXES)


def _audio_cuts(path: Path, skipped: Counter) -> list:
    """One cut per audio file (no text), keyed by its path under the folder without the suffix."""
    if path.is_file():
        files, root = [path], path.parent
    else:
        files, root = audio_files(path), path
        if not files:
            raise InputError(f"{path}: no audio files ({', '.join(AUDIO_SUFFIXES)}) in this folder or below it")
    cuts = []
    for file in files:
        key = "_".join(file.relative_to(root).with_suffix("").as_posix().split())  # Kaldi keys hold no spaces
        rec = make_recording(key, file, skipped)
        if rec is not None:
            cuts.append(make_cut(key, rec, None))
    return cuts


def _read_source(path: Path, kind: str, skipped: Counter) -> list:
    if kind == "audio":
        return _audio_cuts(path, skipped)
    if kind == "wenet":
        return list(import_wenet(path, skipped, require_text=False))
    if kind == "nemo":
        return list(import_nemo(path, skipped, require_text=False))
    if kind == "kaldi":
        scp = path / "wav.scp" if path.is_dir() else path
        text = scp.parent / "text"
        return list(kaldi_cuts(scp, read_table(text) if text.is_file() else None, skipped))
    from asr.data.manifest import read_cuts

    return list(read_cuts(path))


def _text(cut) -> str | None:
    """The cut's reference, None when it has none (an empty transcript is a reference: it is scored)."""
    texts = [s.text for s in cut.supervisions if s.text is not None]
    return squeeze_spaces(" ".join(texts)) if texts else None


def read_inputs(sources: Sequence[str | Path], text: str | Path | None = None) -> Inputs:
    """Every source's cuts, in order (module docstring). ``text``: a Kaldi-style ``key transcript``
    file whose lines are the references of the cuts with those keys (over what the sources hold)."""
    if not sources:
        raise InputError("no inputs given")
    skipped: Counter = Counter()
    kinds, cuts, seen = [], [], set()
    for source in sources:
        path = Path(source)
        kind = detect_kind(path)
        kinds.append(kind)
        for cut in _read_source(path, kind, skipped):
            if cut.id in seen:
                skipped["duplicate_key"] += 1
                continue
            seen.add(cut.id)
            cuts.append(cut)
    if text is not None:
        text = Path(text)
        if not text.is_file():
            raise InputError(f"{text}: no such references file")
        table = read_table(text)
        for cut in cuts:
            if cut.id in table and cut.supervisions:
                cut.supervisions[0].text = squeeze_spaces(table[cut.id])
    with_text = [c for c in cuts if _text(c) is not None]
    if with_text and len(with_text) < len(cuts):
        skipped["no_transcript"] += len(cuts) - len(with_text)
        cuts = with_text
    return Inputs(CutSet.from_cuts(cuts), bool(with_text), kinds, skipped)


def hypothesis_lines(records: Sequence[dict]) -> str:
    """Kaldi-style ``key hypothesis`` lines of decoded records (``key``, ``hyp``)."""
    return "".join(f"{r['key']} {r['hyp']}".rstrip() + "\n" for r in records)


@dataclass(frozen=True)
class StreamItem:
    """One utterance to stream: a display ``name``, its ``key``, reference ``text`` (None: none) and
    ``source``, an audio file named on its own (a Path) or a Lhotse cut."""

    name: str
    key: str
    text: str | None
    source: object

    def load(self):
        """(n,) float32 at SAMPLE_RATE; ``asr.data.audio.AudioError`` (one line, with a reason) when unreadable."""
        from asr.data.audio import cut_waveform, load_audio

        return load_audio(self.source) if isinstance(self.source, Path) else cut_waveform(self.source)


@dataclass
class StreamItems:
    """The utterances of every source in order, the entries skipped (reason -> count) and one error
    line per source that could not be read at all."""

    items: list[StreamItem]
    skipped: Counter
    errors: list[str]


def stream_items(sources: Sequence[str | Path], text: str | Path | None = None) -> StreamItems:
    """What a streaming client feeds, source by source. An audio file named on its own stays one
    item even when it is missing or unreadable (its :meth:`StreamItem.load` raises, so the client
    reports it by name, as a file it was asked for); any other source is read with :func:`read_inputs`."""
    table = {}
    if text is not None:
        if not Path(text).is_file():
            raise InputError(f"{text}: no such references file")
        table = {k: squeeze_spaces(v) for k, v in read_table(Path(text)).items()}
    items, skipped, errors = [], Counter(), []
    for source in sources:
        path = Path(source)
        if path.suffix.lower() in AUDIO_SUFFIXES and not path.is_dir():
            items.append(StreamItem(path.name, path.stem, table.get(path.stem), path))
            continue
        try:
            inputs = read_inputs([path])
        except InputError as err:
            errors.append(str(err))
            continue
        skipped.update(inputs.skipped)
        items += [StreamItem(cut.id, cut.id, table.get(cut.id, _text(cut)), cut) for cut in inputs.cuts]
    return StreamItems(items, skipped, errors)
