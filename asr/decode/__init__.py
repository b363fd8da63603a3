"""Decoding algorithms: CTC greedy / prefix beam, attention beam, attention rescoring, WER.

The split-level evaluation (a cut set in, per-utterance records and totals out) is
``asr.evaluation.split``; it reads audio through ``asr.data`` (Lhotse, torchaudio), so
it is not imported here, where the streaming recognizer needs only the searches.
"""

from asr.decode.attention_beam import attention_beam_search
from asr.decode.batch import MODES, decode_batch
from asr.decode.ctc_greedy import ctc_greedy
from asr.decode.ctc_prefix_beam import CtcPrefixBeamSearch, ctc_prefix_beam_search
from asr.decode.rescoring import attention_rescoring, rescoring_scores
from asr.decode.wer import ErrorCounter

__all__ = [
    "MODES",
    "CtcPrefixBeamSearch",
    "ErrorCounter",
    "attention_beam_search",
    "attention_rescoring",
    "ctc_greedy",
    "ctc_prefix_beam_search",
    "decode_batch",
    "rescoring_scores",
]
