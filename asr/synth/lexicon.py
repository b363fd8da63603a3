"""Word lists shipped as package data (`asr/synth/resources/*.txt`) and English inflection.

Formats (one or more entries per line, `#` starts a comment line):
nouns `word` or `word:plural` (`word:-` = no plural); verbs `base`, `base:past` or
`base:past:ing` (irregular forms; the rest follows spelling rules).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

_VOWELS = set("aeiou")


@dataclass(frozen=True)
class Noun:
    singular: str
    plural: str | None  # None for mass nouns ("rice")


@dataclass(frozen=True)
class Verb:
    base: str
    third: str  # "walks"
    past: str  # "walked"
    ing: str  # "walking"


@dataclass(frozen=True)
class Lexicon:
    nouns: tuple[Noun, ...]
    verbs: tuple[Verb, ...]
    adjectives: tuple[str, ...]
    names: tuple[str, ...]
    places: tuple[str, ...]

    def countable_nouns(self) -> tuple[Noun, ...]:
        return tuple(n for n in self.nouns if n.plural is not None)


def _entries(filename: str) -> list[str]:
    """Whitespace-separated entries of one resource file, first occurrence wins."""
    text = resources.files("asr.synth").joinpath("resources").joinpath(filename).read_text("utf-8")
    seen: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        for entry in line.split():
            seen.setdefault(entry.split(":")[0], entry)
    return list(seen.values())


def plural_of(word: str) -> str:
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    if word.endswith("y") and len(word) > 1 and word[-2] not in _VOWELS:
        return word[:-1] + "ies"
    return word + "s"


def third_person_of(base: str) -> str:
    if base in ("be", "have", "do", "go"):
        return {"be": "is", "have": "has", "do": "does", "go": "goes"}[base]
    if base.endswith("o"):
        return base + "es"
    return plural_of(base)


def past_of(base: str) -> str:
    if base.endswith("e"):
        return base + "d"
    if base.endswith("y") and base[-2] not in _VOWELS:
        return base[:-1] + "ied"
    return base + "ed"


def ing_of(base: str) -> str:
    if base.endswith("ie"):
        return base[:-2] + "ying"
    if base.endswith("e") and not base.endswith(("ee", "ye", "oe")) and len(base) > 2:
        return base[:-1] + "ing"
    return base + "ing"


def _parse_noun(entry: str) -> Noun:
    word, _, plural = entry.partition(":")
    if plural == "-":
        return Noun(word, None)
    return Noun(word, plural or plural_of(word))


def _parse_verb(entry: str) -> Verb:
    parts = entry.split(":")
    base = parts[0]
    past = parts[1] if len(parts) > 1 else past_of(base)
    ing = parts[2] if len(parts) > 2 else ing_of(base)
    return Verb(base, third_person_of(base), past, ing)


@lru_cache(maxsize=1)
def load_lexicon() -> Lexicon:
    """The shipped word lists, parsed once per process."""
    return Lexicon(
        nouns=tuple(_parse_noun(e) for e in _entries("nouns.txt")),
        verbs=tuple(_parse_verb(e) for e in _entries("verbs.txt")),
        adjectives=tuple(_entries("adjectives.txt")),
        names=tuple(_entries("names.txt")),
        places=tuple(_entries("places.txt")),
    )
