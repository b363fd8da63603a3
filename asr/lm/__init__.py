"""Language models for decoding: a token n-gram model, a word n-gram with its lexicon, shallow fusion.

Pure Python (no torch): the streaming recognizer and the server import it as
they import the searches. The token model's "words" are the ASR model's token ids, so
tokenizer and token LM must come from the same prepare run; the ARPA file
names tokens by their pieces, and loading it with another tokenizer fails with a
clear message instead of scoring the wrong ids. The word LM (asr.lm.words) names
words, so any tokenizer that marks word starts can use it.
"""

from asr.lm.fusion import Fusion, FusionSum, ShallowFusion
from asr.lm.ngram import NgramLM, load_arpa, save_arpa, train_kneser_ney
from asr.lm.options import add_lm_arguments, fusion_from_args, lm_argv
from asr.lm.token_lm import (DEFAULT_LENGTH_BONUS, DEFAULT_LM_ORDER, DEFAULT_LM_WEIGHT, lm_path, load_token_lm,
                             token_names, train_token_lm)
from asr.lm.words import (DEFAULT_OOV_PENALTY, DEFAULT_WORD_BONUS, DEFAULT_WORD_LM_ORDER, DEFAULT_WORD_LM_WEIGHT,
                          WordFusion, load_word_lm, save_word_lm, train_word_lm, word_lm_path)

__all__ = ["DEFAULT_LENGTH_BONUS", "DEFAULT_LM_ORDER", "DEFAULT_LM_WEIGHT", "DEFAULT_OOV_PENALTY",
           "DEFAULT_WORD_BONUS", "DEFAULT_WORD_LM_ORDER", "DEFAULT_WORD_LM_WEIGHT", "Fusion", "FusionSum", "NgramLM",
           "ShallowFusion", "WordFusion", "add_lm_arguments", "fusion_from_args", "lm_argv", "lm_path", "load_arpa",
           "load_token_lm", "load_word_lm", "save_arpa", "save_word_lm", "token_names", "train_kneser_ney",
           "train_token_lm", "train_word_lm", "word_lm_path"]
