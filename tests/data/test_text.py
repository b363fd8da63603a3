import pytest

from asr.data.text import normalize_text, number_to_words, ordinal_words, time_words, year_words


@pytest.mark.parametrize("n, words", [
    (0, "zero"), (13, "thirteen"), (40, "forty"), (99, "ninety nine"), (100, "one hundred"),
    (105, "one hundred and five"), (2024, "two thousand and twenty four"),
    (1_000_001, "one million and one"), (3_450_000, "three million four hundred and fifty thousand"),
])
def test_number_to_words(n, words):
    assert number_to_words(n) == words


def test_ordinals_years_times():
    assert ordinal_words(1) == "first"
    assert ordinal_words(22) == "twenty second"
    assert ordinal_words(30) == "thirtieth"
    assert year_words(1987) == "nineteen eighty seven"
    assert year_words(1905) == "nineteen oh five"
    assert year_words(2007) == "two thousand and seven"
    assert time_words(19, 30) == "seven thirty"
    assert time_words(0, 0) == "twelve o'clock"
    assert time_words(9, 5) == "nine oh five"


def test_normalize_keeps_only_spoken_words():
    assert normalize_text("Call Anna at 7, NOW!") == "call anna at seven now"
    assert normalize_text("  'quoted'  don't -- stop ") == "quoted don't stop"


def test_bad_numbers_raise():
    with pytest.raises(ValueError, match="-1"):
        number_to_words(-1)
    with pytest.raises(ValueError):
        time_words(24, 0)
