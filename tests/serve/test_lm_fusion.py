"""A token LM in the many-stream MultiStreamRecognizer: every stream's beam and final rescoring use it."""

import torch

from asr.data.features import SAMPLE_RATE
from asr.decode.ctc_prefix_beam import CtcPrefixBeamSearch, ctc_prefix_beam_search
from asr.decode.options import DecodeOptions
from asr.lm import ShallowFusion, train_token_lm
from asr.decode.endpoint import EndpointConfig
from asr.serve.multi_stream import MultiStreamRecognizer
from asr.streaming.recognizer import StreamingRecognizer
from tests.serve.helpers import noise

C, LEFT = 4, 2
TEXTS = ["abc de fgh", "fgh abc", "de de abc", "abc abc"]


def final_text(rec, wave):
    stream = rec.create_stream()
    stream.accept_waveform(SAMPLE_RATE, wave)
    stream.finish()
    rec.decode()
    assert stream.is_done()
    return stream.result()


def test_fusion_in_every_stream_equals_the_single_stream_recognizer(model, tokenizer):
    lm = train_token_lm(TEXTS, tokenizer, 3)
    wave = noise(2.0, 3, SAMPLE_RATE)
    no_endpoint = EndpointConfig(enabled=False)

    def served(fusion):
        rec = MultiStreamRecognizer(model, tokenizer, DecodeOptions(chunk_size=C, left_chunks=LEFT, beam=3),
                                    endpoint=no_endpoint, fusion=fusion)
        return final_text(rec, wave)

    plain = served(None)
    assert served(ShallowFusion(lm, 0.0, 0.0)).text == plain.text  # weight 0: the same text
    strong = ShallowFusion(lm, 2.0, 1.0)
    fused = served(strong)
    alone = StreamingRecognizer(model, tokenizer, DecodeOptions(chunk_size=C, left_chunks=LEFT, beam=3, ctc_weight=0.5),
                                fusion=strong)
    alone.accept_waveform(wave)
    assert fused.text == alone.finalize()
    assert fused.text != plain.text  # the LM changed the result, so the equality above meant something


def test_partial_is_the_fused_prefix_beam_best(model, tokenizer):
    strong = ShallowFusion(train_token_lm(TEXTS, tokenizer, 3), 2.0, 1.0)
    rec = MultiStreamRecognizer(model, tokenizer, DecodeOptions(chunk_size=C, left_chunks=LEFT, beam=3),
                                endpoint=EndpointConfig(enabled=False), fusion=strong)
    stream = rec.create_stream()
    stream.accept_waveform(SAMPLE_RATE, noise(1.0, 7, SAMPLE_RATE))
    rec.decode()
    result = stream.result()
    assert not result.is_final
    lp = torch.cat(stream._utt.log_probs)  # (T', V)
    alone = CtcPrefixBeamSearch(3, model.blank_id, strong)
    alone.advance(lp)
    # ranked as prefixes (the utterance goes on), not as finished sentences
    assert list(result.hyps[0].tokens) == alone.best() == alone.nbest(complete=False)[0][0]
    assert list(result.hyps[0].tokens) != ctc_prefix_beam_search(lp, 3, model.blank_id)[0][0]
