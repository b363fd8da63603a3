"""Endpoint detection from CTC blank posteriors (Kaldi / Wenet style rules): the server's streams
(``asr.serve.stream``) and decode.py's long inputs (``asr.decode.endpointed``) end utterances by them.

A frame is non-speech when its CTC blank probability exceeds ``blank_threshold``.
A rule fires when all its conditions hold for the current utterance:

* ``must_contain_speech``: at least one speech frame was seen;
* trailing non-speech lasted at least ``min_trailing_silence_s``;
* the utterance is at least ``min_utterance_s`` long.

The defaults are Wenet's: no speech for 5 s; 1 s of silence after speech; an
utterance of 20 s (:func:`default_rules` takes another trailing silence).

:meth:`EndpointDetector.advance_to_endpoint` decides at frame resolution and says where the
next utterance starts: when speech resumes after the endpoint inside the same chunk, the next
utterance starts right after the silence that ended this one, so its onset is not lost to
this utterance's final.

``EndpointConfig.reset`` says what restarts at an endpoint besides the decoder: the encoder's
cache (``cache``, as Wenet's runtime resets its model), the online CMN's running sums
(``cmn``), ``both`` or ``none`` (continuous decoding carries both on).

The speaker's level (``EndpointConfig.speaker_margin_db``): behind a speaker, a television or
other people talk; the VAD hears speech all the time and the recognizer emits their words, so
neither blank frames nor the VAD end the speaker's sentence. Given each frame's audio level
(:class:`~asr.decode.levels.LevelTrack`), the detector follows the speaker's level
(:class:`~asr.decode.levels.SpeakerLevel`: the loudest frame the recognizer emitted on, falling
slowly) and counts a frame more than ``speaker_margin_db`` under it as non-speech whatever the
recognizer says: talk that far under the speaker is not the speaker. The speaker's level lasts the
stream (it outlives each utterance). A frame whose level is not known counts by its blank
probability alone.

A frame is judged by the audio around it, not by itself (``speaker_window_s``): its level is the
loudest known level within half the window either side (:func:`~asr.decode.levels.surrounding_levels`),
because a word's unvoiced consonants, onsets and endings sit 20-30 dB under the vowels next to
them. The window sees the frames before a chunk and the chunk's own frames, never later ones (their audio
need not have arrived, and what has depends on how the client cut it), so the last frames of a
chunk see less of what follows: a quiet onset there whose vowel falls in the next chunk is judged
by what came before it. The same decision ends utterances and, with ``suppress_background``,
makes the frame a certain blank for the search, so the background's words are not emitted as
the speaker's.

The search is told a frame is background only when the audio ahead of it in its chunk is too, up to
``search_ahead_s`` (:func:`~asr.decode.levels.loudest_ahead`): a frame's output is computed from every frame of
its chunk (chunk attention), so the recognizer emits a word on frames before the word's own audio,
most of all on the first frames of a VAD segment, whose pre-roll is the silence before the onset.
Judged by its own audio, such a frame would make the sentence's first word a blank. How far it looks is a trade:
the default, a whole chunk of 16, keeps first sounds the recognizer emits up to a chunk before their audio; a
shorter look keeps one loud syllable of talk from lifting the frames of a whole chunk before it. The endpoint
rule keeps the window alone: counting those frames as speech would shorten the pause it measures.

The search weighs that heard level, a loudest over a window, against a speaker's level on the same terms
(``search_speaker_window``): the loudest audio around each frame the recognizer emitted on, not the frame's own
level. A CTC spike sits on one 40 ms frame of its word, often not the loudest, so against the frame's own level
talk 15 dB under the speaker's vowels is heard only 12-14 dB under the speaker, and its words are emitted. The
endpoint rule and the speaker's absence keep the frame's own level: a speaker's level taken from windows there
ends sentences at their quiet words under steady noise.

The background's floor (``EndpointConfig.floor_margin_db``): one speaker's sentences differ in
level by 15 dB and more, and the speaker's level falls slowly (it must outlast the pauses, or the
background's talk in them would set it), so a quieter sentence after a loud one lies under the
margin. A frame is therefore background only when its audio is also near the background's own
level (:class:`~asr.decode.levels.BackgroundFloor`: the quietest surrounding level heard, rising
slowly; it lasts the stream): talk behind the speaker sets that floor itself and lies on it, a
quieter sentence in a quiet room lies far over it. Both decisions, the endpoint rule's and the
search's, take the floor. The talk's own pauses do not lower it: a dip far under the floor counts
once it lasted ``floor_hold_s``, longer than the breath in which a few voices fall silent together.

The speaker's absence (``EndpointConfig.absence_s``): with talk behind the speaker the VAD hears speech all the
time, so only the 1 s rule could end an utterance, and a pause shorter than that fuses two sentences. A run of
``absence_s`` (0.3 s, the VAD's own silence) of frames under the speaker's margin and near the floor, each judged
over the narrower ``absence_window_s``, ends the utterance as the VAD's silence would.

While an utterance has no word yet, a whole chunk the search judged background (every frame a certain blank)
also restarts the stream's encoder and decoder (``EndpointConfig.forget_background``): a conformer that heard
seconds of other people's talk in its left context reads the speaker's first words worse than one that starts
just before them, as a sentence alone does. A stream that starts on talk takes it for the speaker until someone
louder by the speaker's margin is heard; when every frame of the utterance before that chunk is background by the
louder level, the chunk is encoded again from a fresh state and the talk before it leaves the utterance. So is the
chunk in which the speaker returns at their own level after at least ``FORGET_AFTER_S`` of such talk: a later
utterance that starts on talk whose words the recognizer reads is never background alone. There the
talk may lie up to ``louder_talker_floor_margin_db`` over the floor, more than the frame rules allow: babble's
syllables stand 11-13 dB over its own troughs, and this test, which acts once and only under a talker the speaker's
margin louder than all before, costs no quieter sentence of a quiet room (those lie 30 dB and more over its
floor). A stream whose talk the recognizer reads no word in has no speaker's level yet; there the test is the frames
before the chunk alone (at least ``FORGET_AFTER_S`` of them, more than a VAD segment's pad): each the margin under
the chunk.

Beside these frame-level decisions, a stream drops whole words of the background from its results
(``EndpointConfig.drop_background_words``, :mod:`asr.decode.background_words`): a word far under the
loudest word of its own utterance and near the floor. The detector keeps, per frame of its last advance,
the level the search judged and the floor then (``heard_db``, ``floor_db``) for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from asr.decode.levels import BackgroundFloor, SpeakerLevel, is_background_level, loudest_ahead, surrounding_levels


@dataclass(frozen=True)
class EndpointRule:
    """One rule; all conditions must hold (see the module docstring)."""

    must_contain_speech: bool
    min_trailing_silence_s: float
    min_utterance_s: float = 0.0

    def __post_init__(self) -> None:
        if self.min_trailing_silence_s < 0 or self.min_utterance_s < 0:
            raise ValueError(
                f"endpoint rule durations must be >= 0, got min_trailing_silence_s="
                f"{self.min_trailing_silence_s}, min_utterance_s={self.min_utterance_s}."
            )
        if self.min_trailing_silence_s == 0 and self.min_utterance_s == 0:
            raise ValueError("an endpoint rule with no trailing silence and no utterance length would fire at once.")

    def fires(self, speech_seen: bool, trailing_silence_s: float, utterance_s: float) -> bool:
        return (
            (speech_seen or not self.must_contain_speech)
            and trailing_silence_s >= self.min_trailing_silence_s
            and utterance_s >= self.min_utterance_s
        )


DEFAULT_TRAILING_SILENCE_S = 1.0  # Wenet's


def default_rules(trailing_silence_s: float = DEFAULT_TRAILING_SILENCE_S) -> tuple[EndpointRule, ...]:
    """Wenet's three rules, with ``trailing_silence_s`` of silence after speech ending an utterance."""
    return (
        EndpointRule(must_contain_speech=False, min_trailing_silence_s=5.0),
        EndpointRule(must_contain_speech=True, min_trailing_silence_s=trailing_silence_s),
        EndpointRule(must_contain_speech=True, min_trailing_silence_s=0.0, min_utterance_s=20.0),
    )


DEFAULT_RULES = default_rules()
ENDPOINT_RESETS = ("none", "cache", "cmn", "both")
# An utterance's background is forgotten (``EndpointConfig.forget_background``) once at least this much of it was
# heard: more than the VAD keeps before an onset (0.3 s), so a segment's own pad stays in the encoder's context.
FORGET_AFTER_S = 0.5


@dataclass(frozen=True)
class EndpointConfig:
    """Endpointing settings; ``enabled=False`` never reports an endpoint."""

    enabled: bool = True
    blank_threshold: float = 0.8
    rules: tuple[EndpointRule, ...] = field(default=DEFAULT_RULES)
    reset: str = "none"  # what restarts at an endpoint besides the decoder (ENDPOINT_RESETS)
    # Frames this many dB under the speaker's level are non-speech (None: blank probability alone). Why 15:
    # talk 15-20 dB under a speaker is a background; a word's own quiet frames are shorter than the
    # trailing silence a rule needs, so they cannot end it.
    speaker_margin_db: float | None = 15.0
    speaker_decay_db_s: float = 0.5  # how fast the speaker's level falls, so a quieter speaker takes over
    # Background frames are read as blank by the search too: the background's words are not emitted as the
    # speaker's (off: the search hears every frame). On: judged against the floor, a quieter sentence keeps
    # its frames.
    suppress_background: bool = True
    # A frame is background when the loudest frame within half this window either side is (see the module
    # docstring; 0: each frame by itself). About a syllable: a consonant next to its vowel is in the window.
    speaker_window_s: float = 0.28
    # The search judges a frame by the loudest audio this far ahead of it in its chunk too (None: the chunk's
    # rest), so a word emitted before its audio stays: a chunk of 16 frames. At a VAD pre-roll's 0.32 s the
    # default model (peak rate 2e-3) lost sentences' first sounds under babble ("ank you very much"); the rest
    # of the chunk keeps them, and a syllable of talk lifts no more frames than the chunk's attention already
    # lets it reach (data/results/robust.md).
    search_ahead_s: float | None = 0.64
    # The search judges against the speaker's level taken over the same window as the level it hears (the loudest
    # audio around each emitted frame; off: each emitted frame's own level, as the endpoint rule does).
    search_speaker_window: bool = True
    # A frame is background only when its audio is also within this many dB over the background's floor
    # (:class:`BackgroundFloor`; None: the speaker's level alone judges): a quieter sentence after a loud one
    # lies far over a quiet room's floor, talk behind the speaker lies on the floor it sets itself.
    floor_margin_db: float | None = 10.0
    floor_rise_db_s: float = 1.0  # how fast the floor follows a background that grows louder
    # A dip far under the floor (BackgroundFloor.DEEP_DIP_DB) lowers it only once it lasted this long: talk behind the
    # speaker pauses for breaths, and its next words must still lie near the floor it set.
    floor_hold_s: float = 0.5
    # The louder talker's test (``forget_background``) takes the talk before as background up to this many dB over
    # the floor (with a floor margin; else by the speaker's level alone): the frame rules' 10 dB leave babble's
    # syllables out.
    louder_talker_floor_margin_db: float = 15.0
    # With suppression and a floor, a word far under the loudest word of its utterance and near the floor is
    # dropped from the stream's partial and final results (asr.decode.background_words): the frame rule keeps
    # the background's words where the stream's speaker level is not set yet or a word's frames pass the margin.
    drop_background_words: bool = True
    # With suppression, the stream forgets the background before an utterance's first word: while the utterance
    # has no word yet, a whole chunk the search judged background (once FORGET_AFTER_S of it was heard) restarts
    # the encoder's caches and the decoder at the next chunk; and a chunk heard the speaker's margin over the
    # speaker's level, when all of the utterance before it is background by that louder level (the stream started
    # on talk), is encoded again from a fresh state. The speaker's first words are then encoded without the talk
    # before them in the attention's left context, as after a short lead-in (seconds of talk before a sentence cost
    # its words far more than a third of a second: data/results/robust.md). The endpoint's counts go on.
    forget_background: bool = True
    # The speaker's absence ends an utterance as the VAD's silence does (its min_silence_s): this long a run of frames
    # under the speaker's margin and near the floor, each judged over ``absence_window_s`` (None: off). The 1 s rule
    # cannot end a shorter pause when talk behind the speaker keeps the VAD open; the window is narrower than
    # ``speaker_window_s`` so that a pause of 0.4 s has 0.3 s of frames out of its sentences' reach, and wide
    # enough that a word's own quiet consonants stay the speaker's.
    absence_s: float | None = 0.3
    absence_window_s: float = 0.2

    def __post_init__(self) -> None:
        if not 0.0 < self.blank_threshold < 1.0:
            raise ValueError(f"blank_threshold ({self.blank_threshold}) must be a probability in (0, 1).")
        if (self.speaker_margin_db is not None and self.speaker_margin_db <= 0) or self.speaker_decay_db_s < 0:
            raise ValueError(f"speaker_margin_db ({self.speaker_margin_db}) must be > 0 or None and "
                             f"speaker_decay_db_s ({self.speaker_decay_db_s}) >= 0.")
        if not 0.0 <= self.speaker_window_s < math.inf:
            raise ValueError(f"speaker_window_s ({self.speaker_window_s}) must be a finite number of seconds >= 0.")
        if self.search_ahead_s is not None and not 0.0 <= self.search_ahead_s < math.inf:
            raise ValueError(f"search_ahead_s ({self.search_ahead_s}) must be a finite number of seconds >= 0 or None.")
        if (self.floor_margin_db is not None and self.floor_margin_db < 0) or not 0 < self.floor_rise_db_s < math.inf:
            raise ValueError(f"floor_margin_db ({self.floor_margin_db}) must be >= 0 or None and floor_rise_db_s "
                             f"({self.floor_rise_db_s}) a finite number > 0.")
        if not 0 <= self.floor_hold_s < math.inf:
            raise ValueError(f"floor_hold_s ({self.floor_hold_s}) must be a finite number of seconds >= 0.")
        if not 0 <= self.louder_talker_floor_margin_db < math.inf:
            raise ValueError(f"louder_talker_floor_margin_db ({self.louder_talker_floor_margin_db}) must be a finite "
                             f"number >= 0.")
        absence_ok = self.absence_s is None or 0 < self.absence_s < math.inf
        if not absence_ok or not 0 <= self.absence_window_s < math.inf:
            raise ValueError(f"absence_s ({self.absence_s}) must be a finite number of seconds > 0 or None and "
                             f"absence_window_s ({self.absence_window_s}) one >= 0.")
        if self.reset not in ENDPOINT_RESETS:
            raise ValueError(f"endpoint reset {self.reset!r} is not one of {', '.join(ENDPOINT_RESETS)}.")

    @property
    def drops_background_words(self) -> bool:
        """Background words are dropped: the switch, with suppression, a speaker's level and a floor to judge by."""
        return (self.drop_background_words and self.suppress_background and self.speaker_margin_db is not None
                and self.floor_margin_db is not None)

    @property
    def forgets_background(self) -> bool:
        """Background-only chunks before an utterance's first word restart the encoder: the switch, with suppression
        and a speaker's level to judge by."""
        return self.forget_background and self.suppress_background and self.speaker_margin_db is not None

    @property
    def louder_talker_floor_margin(self) -> float | None:
        """The floor margin the louder talker's test judges the talk before by (None: the speaker's level alone)."""
        return None if self.floor_margin_db is None else self.louder_talker_floor_margin_db

    @property
    def ends_at_absence(self) -> bool:
        """The speaker's absence ends an utterance: the rule's length, a speaker's level and a floor to judge by."""
        return self.absence_s is not None and self.speaker_margin_db is not None and self.floor_margin_db is not None

    @property
    def resets_cache(self) -> bool:
        return self.reset in ("cache", "both")

    @property
    def resets_cmn(self) -> bool:
        return self.reset in ("cmn", "both")


class EndpointDetector:
    """Counts speech and trailing non-speech frames of one utterance.

    Args:
        config: the rules.
        blank_id: CTC blank index.
        frame_s: seconds per encoder frame.
    """

    def __init__(self, config: EndpointConfig, blank_id: int, frame_s: float) -> None:
        if frame_s <= 0:
            raise ValueError(f"frame_s ({frame_s}) must be > 0.")
        self.config = config
        self.blank_id = blank_id
        self.frame_s = frame_s
        self._log_threshold = math.log(config.blank_threshold)
        self.speaker = (SpeakerLevel(config.speaker_margin_db, config.speaker_decay_db_s, frame_s)
                        if config.speaker_margin_db is not None else None)  # lasts the stream, not an utterance
        self.floor = (BackgroundFloor(config.floor_rise_db_s, frame_s, config.floor_hold_s)
                      if self.speaker is not None and config.floor_margin_db is not None else None)  # so does this
        # The speaker's level the search judges by: from the windows around emitted frames (None: ``speaker``'s).
        self.search_speaker = (SpeakerLevel(config.speaker_margin_db, config.speaker_decay_db_s, frame_s)
                               if self.speaker is not None and config.search_speaker_window else None)
        # Frames either side of a frame whose levels judge it (the levels a caller passes as ``earlier_db``).
        self.context_frames = int(config.speaker_window_s / (2 * frame_s) + 1e-9)
        self.absence_frames = int(config.absence_window_s / (2 * frame_s) + 1e-9)  # each side, for the absence rule
        self.search_ahead_frames = (None if config.search_ahead_s is None
                                    else int(config.search_ahead_s / frame_s + 1e-9))
        self.reset()

    def reset(self) -> None:
        """A new utterance: no frames, no speech."""
        self.frames = 0
        self.trailing_silence_frames = 0
        self.trailing_absence_frames = 0  # frames the speaker has been absent for (the absence rule)
        self.speech_seen = False
        self.speaker_heard = False  # a speech frame the speaker was not absent on (the absence rule needs one)
        self.absent: list[bool] = []  # per frame of the last advance: the speaker absent (under the absence window)
        self.background: list[bool] = []  # per frame of the last advance: under the speaker's level
        self.search_background: list[bool] = []  # what the search heard is, by its speaker's level: a certain blank
        self.heard_db: list[float] = []  # per frame of the last advance: the level the search judged (NaN: unknown)
        self.floor_db: list[float] = []  # and the background's floor then (NaN: none)

    def advance(self, log_probs: torch.Tensor, levels_db: torch.Tensor | None = None,
                earlier_db: torch.Tensor | None = None) -> None:
        """Consume (t, V) CTC log-probabilities of the next t frames (and their levels, when known: see
        :meth:`advance_to_endpoint`)."""
        for is_silent, is_absent in zip(self._silent(log_probs, levels_db, earlier_db), self.absent):
            self._count(is_silent, is_absent)

    def advance_to_endpoint(self, log_probs: torch.Tensor, levels_db: torch.Tensor | None = None,
                            earlier_db: torch.Tensor | None = None) -> int | None:
        """Consume (t, V) frames up to an endpoint; returns where the next utterance starts, or None.

        ``levels_db``: the frames' (t,) audio levels (:class:`~asr.decode.levels.LevelTrack`) for the
        speaker's-level rule; ``earlier_db``: the (``context_frames``,) levels of the frames just before them
        (None: unknown, as at a segment's start).

        None: no rule fired, all t frames were consumed. Else s in (0, t]: frames [0, s) belong to the
        utterance that ended. s is t unless speech resumes inside these frames after a silent frame at
        or after the endpoint frame; then s is the frame after that silent frame, and frames [s, t)
        (the silence before the new speech and its onset) are the next utterance's.
        """
        silent = self._silent(log_probs, levels_db, earlier_db)
        absent = self.absent
        for fired, is_silent in enumerate(silent):
            self._count(is_silent, absent[fired])
            if self.is_endpoint():
                break
        else:
            return None
        # A rule that fires during speech (the utterance length) splits at the first pause after it.
        pause = next((i for i in range(fired, len(silent)) if silent[i]), None)
        start = len(silent)
        if pause is not None and not all(silent[pause + 1 :]):
            start = pause + 1
        for is_silent, is_absent in zip(silent[fired + 1 : start], absent[fired + 1 : start]):
            self._count(is_silent, is_absent)
        return start

    def _silent(self, log_probs: torch.Tensor, levels_db: torch.Tensor | None,
                earlier_db: torch.Tensor | None) -> list[bool]:
        """Per frame: non-speech (blank, or the audio around it background: under the speaker's level and near
        the floor). The speaker's level and the floor follow the frames here, in order, whether or not an
        endpoint stops the count before them."""
        if log_probs.dim() != 2:
            raise ValueError(f"log_probs must be (t, V), got shape {tuple(log_probs.shape)}.")
        blank = (log_probs[:, self.blank_id] > self._log_threshold).tolist()
        self.background, self.search_background = [], []
        self.heard_db, self.floor_db = [math.nan] * len(blank), [math.nan] * len(blank)
        self.absent = [False] * len(blank)
        if self.speaker is None or levels_db is None:
            return blank
        if levels_db.shape != (log_probs.size(0),):
            raise ValueError(f"levels_db must be ({log_probs.size(0)},), got shape {tuple(levels_db.shape)}.")
        if earlier_db is not None and earlier_db.dim() != 1:
            raise ValueError(f"earlier_db must be (e,), got shape {tuple(earlier_db.shape)}.")
        levels = levels_db.double().numpy()
        earlier = earlier_db.double().numpy() if earlier_db is not None else np.zeros(0)
        around = surrounding_levels(levels, earlier, self.context_frames)
        heard = np.fmax(around, loudest_ahead(levels, self.search_ahead_frames))  # what the recognizer heard
        absence = self.config.ends_at_absence
        nearby = surrounding_levels(levels, earlier, self.absence_frames).tolist() if absence else []  # its window
        silent = []
        self.heard_db = heard.tolist()
        for k, (is_blank, level, level_around, level_heard) in enumerate(
                zip(blank, levels.tolist(), around.tolist(), self.heard_db)):
            if self.floor is not None and self.floor.level_db is not None:
                self.floor_db[k] = self.floor.level_db  # the floor this frame is judged against
            if absence:
                self.absent[k] = self._is_background(nearby[k])
            self.background.append(self._is_background(level_around))
            self.search_background.append(self._is_background(level_heard, self.search_speaker))
            silent.append(is_blank or self.background[-1])
            self.speaker.update(level, emitted=not is_blank)  # the speaker's level: the frame's own
            if self.search_speaker is not None:
                self.search_speaker.update(level_around, emitted=not is_blank)
            if self.floor is not None:
                self.floor.update(level_around)
        return silent

    def _is_background(self, level_db: float, speaker: SpeakerLevel | None = None) -> bool:
        """Audio this loud is far under the speaker (``speaker``, else the frames' own) and, with a floor, near the
        background's floor."""
        floor, speaker = self.floor, speaker or self.speaker
        return is_background_level(level_db, speaker.level_db, speaker.margin_db,
                                   None if floor is None else floor.level_db,
                                   None if floor is None else self.config.floor_margin_db)

    def suppressed(self, log_probs: torch.Tensor) -> torch.Tensor:
        """(t, V) ``log_probs`` of the last advance with its background frames (``search_background``) made
        certain blanks (when ``suppress_background``; else unchanged)."""
        judged = self.search_background
        if not self.config.suppress_background or not any(judged):
            return log_probs
        mask = torch.tensor(judged[: log_probs.size(0)] + [False] * (log_probs.size(0) - len(judged)))
        blank = torch.full_like(log_probs[0], float("-inf"))
        blank[self.blank_id] = 0.0
        return torch.where(mask[:, None], blank, log_probs)

    def _count(self, is_silent: bool, is_absent: bool = False) -> None:
        if is_silent:
            self.trailing_silence_frames += 1
        else:
            self.trailing_silence_frames = 0
            self.speech_seen = True
        self.trailing_absence_frames = self.trailing_absence_frames + 1 if is_absent else 0
        self.speaker_heard = self.speaker_heard or not (is_silent or is_absent)
        self.frames += 1

    def is_endpoint(self) -> bool:
        if not self.config.enabled or self.frames == 0:
            return False
        trailing = self.trailing_silence_frames * self.frame_s
        length = self.frames * self.frame_s
        if any(rule.fires(self.speech_seen, trailing, length) for rule in self.config.rules):
            return True
        absence = self.config.absence_s
        return (self.config.ends_at_absence and self.speaker_heard
                and self.trailing_absence_frames * self.frame_s >= absence - 1e-9)
