"""Sentence generator for the synthetic corpus: commands, numbers, dates, times,
everyday phrases, questions and freer noun/verb/adjective templates.

Every sentence is already normalized (lowercase words, apostrophes, numbers
spelled out), so it is exactly what eSpeak says. All randomness comes from the
`random.Random` passed in, so a (seed, split, index) triple always gives the
same sentence.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from asr.synth.lexicon import Lexicon, load_lexicon
from asr.data.text import (
    MONTHS, WEEKDAYS, normalize_text, number_to_words, ordinal_words, time_words, year_words,
)

ROOMS = ["kitchen", "bedroom", "bathroom", "living room", "hallway", "garage", "office", "basement",
         "dining room", "porch", "garden", "attic"]
DEVICES = ["lights", "lamp", "heater", "fan", "television", "radio", "music", "oven", "air conditioner",
           "coffee machine", "dishwasher", "speaker", "alarm", "sprinklers"]
GENRES = "jazz rock classical pop country folk blues reggae soul piano".split()
RELATIVES = "mother father sister brother aunt uncle cousin grandmother grandfather neighbor friend boss".split()
DAY_PARTS = ["morning", "afternoon", "evening", "night", "weekend", "summer", "winter"]
PHRASES = [
    "thank you very much", "could you help me with this please", "i'm sorry i'm late again",
    "see you tomorrow morning", "that sounds like a great idea", "let me think about it for a minute",
    "i don't know what to say", "nice to meet you", "have a wonderful weekend",
    "please close the door behind you", "it's nice and warm today", "how was your day",
    "i'll call you back in a few minutes", "can you speak a little slower please", "what do you mean by that",
    "i can't find my keys anywhere", "we're running out of time", "don't worry about it",
    "excuse me where is the nearest station", "good luck with your exam", "what a beautiful morning",
    "i would like a cup of tea please", "the shop closes early on sundays", "it was a pleasure working with you",
]


def _a(word: str) -> str:
    """Indefinite article that matches how the next word starts."""
    return ("an " if word[0] in "aeiou" else "a ") + word


class SentenceGenerator:
    """Draws one sentence per call from a weighted set of templates."""

    def __init__(self, lexicon: Lexicon | None = None) -> None:
        self.lex = lexicon or load_lexicon()
        self._countable = self.lex.countable_nouns()
        # freer templates carry most of the vocabulary, so they get most weight
        self._templates: list[tuple[Callable[[random.Random], str], float]] = [
            (self._command, 2.0), (self._number, 1.0), (self._date, 1.0), (self._clock, 1.0),
            (self._phrase, 0.5), (self._question, 2.0), (self._free, 5.0),
        ]

    def __call__(self, rng: random.Random) -> str:
        funcs, weights = zip(*self._templates)
        template = rng.choices(funcs, weights=weights)[0]
        return normalize_text(template(rng))

    # slot fillers
    def _noun(self, rng: random.Random) -> str:
        return rng.choice(self.lex.nouns).singular

    def _plural(self, rng: random.Random) -> str:
        return rng.choice(self._countable).plural  # type: ignore[return-value]

    def _adj(self, rng: random.Random) -> str:
        return rng.choice(self.lex.adjectives)

    def _verb(self, rng: random.Random):
        return rng.choice(self.lex.verbs)

    def _name(self, rng: random.Random) -> str:
        return rng.choice(self.lex.names)

    def _place(self, rng: random.Random) -> str:
        return rng.choice(self.lex.places)

    def _time(self, rng: random.Random) -> str:
        return time_words(rng.randrange(24), rng.choice([0, 5, 10, 15, 20, 30, 40, 45, rng.randrange(60)]))

    def _date(self, rng: random.Random) -> str:
        day = ordinal_words(rng.randint(1, 28))
        month = rng.choice(MONTHS)
        forms = [
            f"the meeting is on {rng.choice(WEEKDAYS)} the {day} of {month}",
            f"{self._name(rng)} was born on {month} {day} {year_words(rng.randint(1905, 2024))}",
            f"the {self._noun(rng)} arrives on the {day} of {month}",
            f"we moved to {self._place(rng)} in {year_words(rng.randint(1950, 2024))}",
            f"is the {self._adj(rng)} {self._noun(rng)} due before {month} {day}",
        ]
        return rng.choice(forms)

    # templates
    def _command(self, rng: random.Random) -> str:
        room, device = rng.choice(ROOMS), rng.choice(DEVICES)
        forms = [
            f"turn {rng.choice(['on', 'off'])} the {room} {device}",
            f"turn {rng.choice(['on', 'off'])} the {room} {device} at {self._time(rng)}",
            f"set an alarm for {self._time(rng)} on {rng.choice(WEEKDAYS)}",
            f"set a timer for {number_to_words(rng.randint(2, 90))} minutes",
            f"remind me to {self._verb(rng).base} the {self._noun(rng)} on {rng.choice(WEEKDAYS)}",
            f"call {self._name(rng)} at {self._time(rng)}",
            f"play some {rng.choice(GENRES)} music in the {room}",
            f"add {number_to_words(rng.randint(2, 12))} {self._plural(rng)} to my shopping list",
            f"what's the weather like in {self._place(rng)} {rng.choice(['tomorrow', 'today', 'this weekend'])}",
            f"send a message to {self._name(rng)} saying i'll be late",
            f"please {self._verb(rng).base} the {self._adj(rng)} {self._noun(rng)} in the {room}",
            f"dim the {room} lights to {number_to_words(rng.randrange(10, 100, 10))} percent",
        ]
        return rng.choice(forms)

    def _number(self, rng: random.Random) -> str:
        digits = " ".join(number_to_words(rng.randrange(10)) for _ in range(rng.randint(4, 7)))
        forms = [
            f"the total comes to {number_to_words(rng.randint(2, 999))} dollars and "
            f"{number_to_words(rng.randint(1, 99))} cents",
            f"my number is {digits}",
            f"there are {number_to_words(rng.randint(2, 5000))} {self._plural(rng)} in the {self._noun(rng)}",
            f"{self._name(rng)} bought {number_to_words(rng.randint(2, 40))} {self._adj(rng)} {self._plural(rng)}",
            f"the {self._noun(rng)} costs {number_to_words(rng.randint(2, 300))} pounds",
            f"room {number_to_words(rng.randint(100, 999))} is on the {ordinal_words(rng.randint(1, 30))} floor",
        ]
        return rng.choice(forms)

    def _clock(self, rng: random.Random) -> str:
        forms = [
            f"the train to {self._place(rng)} leaves at {self._time(rng)}",
            f"let's meet at the {self._noun(rng)} at {self._time(rng)}",
            f"{self._name(rng)} usually {self._verb(rng).third} at {self._time(rng)}",
            f"the {self._adj(rng)} {self._noun(rng)} opens at {self._time(rng)} every {rng.choice(WEEKDAYS)}",
        ]
        return rng.choice(forms)

    def _phrase(self, rng: random.Random) -> str:
        return rng.choice(PHRASES)

    def _question(self, rng: random.Random) -> str:
        verb = self._verb(rng)
        forms = [
            f"where did you put the {self._noun(rng)}",
            f"have you seen my {self._adj(rng)} {self._noun(rng)}",
            f"why is the {self._noun(rng)} so {self._adj(rng)}",
            f"how many {self._plural(rng)} does {self._name(rng)} have",
            f"did {self._name(rng)} {verb.base} the {self._noun(rng)} yesterday",
            f"are you {verb.ing} the {self._plural(rng)} in {self._place(rng)}",
            f"who {verb.past} the {self._adj(rng)} {self._noun(rng)}",
            f"can we {verb.base} {_a(self._adj(rng))} {self._noun(rng)} tomorrow",
            f"what time does the {self._noun(rng)} {verb.base}",
            f"is it {self._adj(rng)} in {self._place(rng)} this {rng.choice(DAY_PARTS)}",
        ]
        return rng.choice(forms)

    def _free(self, rng: random.Random) -> str:
        v1, v2 = self._verb(rng), self._verb(rng)
        forms = [
            f"{self._name(rng)} {v1.past} the {self._adj(rng)} {self._noun(rng)} near the {self._noun(rng)}",
            f"the {self._adj(rng)} {self._noun(rng)} {v1.third} every {rng.choice(DAY_PARTS)}",
            f"{self._name(rng)} and {self._name(rng)} are {v1.ing} in {self._place(rng)}",
            f"i think the {self._noun(rng)} is {self._adj(rng)} but the {self._plural(rng)} are {self._adj(rng)}",
            f"we should {v1.base} the {self._plural(rng)} before the {rng.choice(DAY_PARTS)}",
            f"my {rng.choice(RELATIVES)} {v1.past} {_a(self._adj(rng))} {self._noun(rng)} in "
            f"{self._place(rng)} last {rng.choice(WEEKDAYS)}",
            f"they {v1.past} the {self._plural(rng)} and then {v2.past} home",
            f"don't {v1.base} the {self._adj(rng)} {self._plural(rng)} while you {v2.base}",
            f"{self._name(rng)} was {v1.ing} {_a(self._adj(rng))} {self._noun(rng)} when the {self._noun(rng)} "
            f"{v2.past}",
            f"the {self._plural(rng)} from {self._place(rng)} look {self._adj(rng)} and {self._adj(rng)}",
            f"you can't {v1.base} {_a(self._noun(rng))} without {v2.ing} the {self._noun(rng)}",
        ]
        return rng.choice(forms)


def sentence_rng(seed: int, split: str, index: int, attempt: int = 0) -> random.Random:
    """The RNG for one utterance: a string seed, so it does not depend on hash randomization."""
    return random.Random(f"{seed}/{split}/{index}/{attempt}")
