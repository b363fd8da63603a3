"""ctypes binding to the eSpeak NG library shipped by the `espeakng-loader` wheel.

eSpeak keeps synthesis state in C globals that survive `espeak_Initialize`
(the same text twice in one process gives different samples) and draws noise
from `rand()`. For reproducible audio every call loads the library afresh
(dlopen -> initialize -> seed -> synthesize -> dlclose), which costs ~15 ms,
far less than forking a process with torch loaded.
"""

from __future__ import annotations

import _ctypes
import ctypes

import numpy as np

from asr.extras import require

_AUDIO_OUTPUT_SYNCHRONOUS = 2
_POS_CHARACTER = 1
_ESPEAK_CHARS_AUTO = 0
_ESPEAK_RATE = 1
_ESPEAK_PITCH = 3
_ESPEAK_RANGE = 4
_ESPEAK_WORDGAP = 7
_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)


class EspeakSynthesizer:
    """Text -> int16 mono waveform at `sample_rate` (22050 Hz), reproducible for a given seed."""

    def __init__(self) -> None:
        espeakng_loader = require("espeakng_loader", "synth", "eSpeak NG (the synth corpus)")
        self.library_path = str(espeakng_loader.get_library_path())
        self.data_path = str(espeakng_loader.get_data_path())
        self._libc = ctypes.CDLL("libc.so.6")
        self._chunks: list[np.ndarray] = []
        # keep a reference: ctypes frees the trampoline when the Python object dies
        self._callback = _CALLBACK(self._on_audio)
        self.sample_rate = 22050

    def _on_audio(self, wav, num_samples: int, events) -> int:
        if num_samples > 0:
            self._chunks.append(np.ctypeslib.as_array(wav, shape=(num_samples,)).copy())
        return 0

    def synthesize(self, text: str, voice: str, rate: int, pitch: int, seed: int = 1, pitch_span: int = 50,
                   word_gap: int = 0) -> np.ndarray:
        """(n,) int16 at `self.sample_rate`; the same arguments always give the same samples.

        pitch_span: eSpeak's pitch range (0 monotone .. 100, default 50); word_gap: extra
        pause between words in units of 10 ms at the default rate (default 0).
        """
        lib = ctypes.CDLL(self.library_path)
        try:
            self.sample_rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, self.data_path.encode(), 0)
            if self.sample_rate <= 0:
                raise RuntimeError(f"espeak_Initialize failed (returned {self.sample_rate})")
            lib.espeak_SetSynthCallback(self._callback)
            if lib.espeak_SetVoiceByName(voice.encode()) != 0:
                raise ValueError(f"eSpeak does not know voice {voice!r}")
            # voice selection resets the parameters, so set them after it
            lib.espeak_SetParameter(_ESPEAK_RATE, int(rate), 0)
            lib.espeak_SetParameter(_ESPEAK_PITCH, int(pitch), 0)
            # only when asked: the default corpus's audio stays what it was before these existed
            if pitch_span != 50:
                lib.espeak_SetParameter(_ESPEAK_RANGE, int(pitch_span), 0)
            if word_gap != 0:
                lib.espeak_SetParameter(_ESPEAK_WORDGAP, int(word_gap), 0)
            # a C long: passing a Python int would leave the high 32 bits undefined
            lib.espeak_ng_SetRandSeed(ctypes.c_long(seed))
            self._libc.srand(ctypes.c_uint(seed))
            self._chunks = []
            data = text.encode("utf-8")
            err = lib.espeak_Synth(data, len(data) + 1, 0, _POS_CHARACTER, 0, _ESPEAK_CHARS_AUTO, None, None)
            if err != 0:
                raise RuntimeError(f"espeak_Synth failed with code {err} for {text!r}")
            lib.espeak_Synchronize()
            lib.espeak_Terminate()
        finally:
            handle = lib._handle
            del lib
            _ctypes.dlclose(handle)  # the next call starts from pristine library globals
        if not self._chunks:
            return np.zeros(0, dtype=np.int16)
        return np.concatenate(self._chunks)
