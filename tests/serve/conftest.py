"""Fixtures shared by the serving tests: a char tokenizer and a tiny random model."""

import pytest

from tests.serve.helpers import tiny_model, tiny_tokenizer


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_model(tokenizer)
