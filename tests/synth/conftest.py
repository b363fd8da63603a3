"""Fixtures of the synthetic-corpus tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture
def train_speakers():
    """speakers(profile_name, count) -> the speaker labels of the first ``count`` train indices
    that fall within the duration bounds (first attempt only), as the profile draws them."""
    from asr.synth import corpus, profiles
    from asr.synth.sentences import sentence_rng

    def speakers(profile_name: str, count: int) -> list[str]:
        profile = profiles.PROFILES[profile_name]
        assert not profile.is_clean and profile.for_split("test").is_clean  # only train is changed
        corpus._init_worker()
        made = (corpus._short_utterance(sentence_rng(0, "train", i, 0), "train", profile) for i in range(count))
        return [m[1].voice for m in made if m is not None]

    return speakers
