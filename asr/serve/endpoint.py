"""The endpoint rules the server applies: they live in :mod:`asr.decode.endpoint`, below the server, because
decode.py's long-file decoding (:mod:`asr.decode.endpointed`) ends utterances by the same rules."""

from asr.decode.endpoint import (DEFAULT_RULES, DEFAULT_TRAILING_SILENCE_S, ENDPOINT_RESETS, EndpointConfig,  # noqa: F401
                                 EndpointDetector, EndpointRule, LevelTrack, SpeakerLevel, default_rules)
