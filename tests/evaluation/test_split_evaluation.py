"""The split-level evaluation: loading with counted skips, batching, records in manifest order, totals."""

import numpy as np
import pytest
import soundfile as sf
import torch
from lhotse import AudioSource, Recording

from asr.data.features import FRAME_SHIFT_S, SAMPLE_RATE
from asr.data.importers import make_cut, make_recording
from asr.data.manifest import write_cuts
from asr.decode import decode_batch
from asr.evaluation.split import EvalSet, Utterance, duration_batches, evaluate_utterances, load_utterances
from asr.model import build_encoder
from asr.model.asr_model import AsrModel

WORDS = ["alpha", "bravo", "charlie"]


class WordTokenizer:
    """id i -> a word, cycling (decode only: what the evaluation needs)."""

    def decode(self, ids):
        return " ".join(WORDS[i % len(WORDS)] for i in ids)


@pytest.fixture(scope="module")
def model() -> AsrModel:
    torch.manual_seed(0)
    enc = build_encoder(pos_enc="rel_xl", input_dim=80, d_model=32, num_heads=2, num_layers=1, ffn_dim=64,
                        conv_kernel=3, causal=True, subsampling=4, dropout=0.0)
    return AsrModel(enc, 8, 7, decoder_layers=1, decoder_heads=2, decoder_ffn_dim=64, decoder_dropout=0.0).eval()


def _recording(rec_id, path, seconds=1.0):
    """A Recording whose header is not read (the file may be missing or broken)."""
    return Recording(id=rec_id, sources=[AudioSource(type="file", channels=[0], source=str(path))],
                     sampling_rate=SAMPLE_RATE, num_samples=int(seconds * SAMPLE_RATE), duration=seconds)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval")
    rng = np.random.default_rng(0)
    cuts = []
    for i, seconds in enumerate([0.9, 0.4, 1.3]):
        sf.write(root / f"good{i}.wav", (0.1 * rng.standard_normal(int(seconds * SAMPLE_RATE))).astype(np.float32),
                 SAMPLE_RATE)
        cuts.append(make_cut(f"good{i}", make_recording(f"good{i}", root / f"good{i}.wav"), f"alpha {WORDS[i]}"))
    (root / "corrupt.wav").write_bytes(b"RIFF garbage")
    sf.write(root / "short.wav", np.zeros(100, dtype=np.float32), SAMPLE_RATE)  # under one 25 ms frame
    nan = np.zeros(SAMPLE_RATE, dtype=np.float32)
    nan[500] = np.nan
    sf.write(root / "nan.wav", nan, SAMPLE_RATE, subtype="FLOAT")
    bad = [
        make_cut("notext", make_recording("notext", root / "good0.wav"), "  "),
        make_cut("missing", _recording("missing", root / "nope.wav"), "alpha"),
        make_cut("corrupt", _recording("corrupt", root / "corrupt.wav"), "alpha"),
        make_cut("nan", _recording("nan", root / "nan.wav"), "alpha"),
        make_cut("short", _recording("short", root / "short.wav", 100 / SAMPLE_RATE), "alpha"),
    ]
    # Bad cuts sit between the good ones: skipping must not reorder what is kept.
    write_cuts([cuts[0], *bad[:2], cuts[1], *bad[2:], cuts[2]], root / "cuts_test.jsonl.gz")
    return root / "cuts_test.jsonl.gz"


def test_load_keeps_manifest_order_and_counts_each_skip_reason(manifest):
    data = load_utterances(manifest)
    assert [u.key for u in data.utterances] == ["good0", "good1", "good2"]
    assert data.skipped == {"empty_text": 1, "audio_missing": 1, "audio_corrupt": 1, "audio_nonfinite": 1,
                            "audio_too_short": 1}
    first = data.utterances[0]
    assert first.text == "alpha alpha" and first.seconds == pytest.approx(0.9, abs=1 / SAMPLE_RATE)
    assert first.feats.shape == (88, 80)  # 1 + (14400 - 400) // 160: 25 ms windows every 10 ms
    # max_utts counts usable cuts: the two bad cuts before good1 do not use up the limit.
    assert [u.key for u in load_utterances(manifest, max_utts=2).utterances] == ["good0", "good1"]
    with pytest.raises(ValueError, match="max_utts"):
        load_utterances(manifest, max_utts=0)


def test_load_computes_the_models_own_frames(manifest):
    """A model trained with sherpa-onnx's fbank is evaluated on those frames (centred: 90 for 0.9 s)."""
    from asr.data.audio import load_audio
    from asr.data.features import SHERPA, FbankExtractor

    first = load_utterances(manifest, max_utts=1, features=SHERPA).utterances[0]
    assert first.feats.shape == (90, 80)
    assert torch.equal(first.feats, FbankExtractor(SHERPA)(load_audio(manifest.parent / "good0.wav")))


def test_duration_batches_bound_the_audio_and_keep_every_index():
    seconds = [3.0, 1.0, 2.0, 9.0, 0.5]
    groups = list(duration_batches(seconds, batch_seconds=4.0))
    assert groups == [[4, 1, 2], [0], [3]]  # shortest first; 9 s exceeds the bound and goes alone
    with pytest.raises(ValueError, match="batch_seconds"):
        next(duration_batches(seconds, 0.0))


def _utts(seconds):
    gen = torch.Generator().manual_seed(1)
    return [Utterance(f"u{i}", "alpha bravo", torch.randn(int(s / FRAME_SHIFT_S), 80, generator=gen), s)
            for i, s in enumerate(seconds)]


def test_records_follow_the_input_order_and_totals_add_up(model):
    data = EvalSet(_utts([1.2, 0.5, 0.7, 0.9]), skipped={"audio_corrupt": 2})
    # batches by duration: [u1, u2], [u3], [u0]; the third shortest (u3) is not the third utterance
    result = evaluate_utterances(model, WordTokenizer(), data, ["ctc_greedy", "attention_rescoring"], beam=3,
                                 batch_seconds=1.3)
    assert result.skipped == {"audio_corrupt": 2} and result.audio_seconds == pytest.approx(3.3)
    for mode, mode_result in result.modes.items():
        records = mode_result.records
        assert [r["key"] for r in records] == ["u0", "u1", "u2", "u3"]
        assert [r["seconds"] for r in records] == [1.2, 0.5, 0.7, 0.9]
        totals = mode_result.totals
        assert totals["utterances"] == 4 and totals["rtf"] > 0
        assert totals["wer"] == pytest.approx(sum(r["word_errors"] for r in records) / 8)
    # Each hypothesis is that utterance's own decoding, wherever the batching put it.
    alone = decode_batch(model, data.utterances[2].feats[None], torch.tensor([70]), "ctc_greedy")[0]
    assert result.modes["ctc_greedy"].records[2]["hyp"] == WordTokenizer().decode(alone)
    summary = result.summary()
    assert summary["skipped_utterances"] == {"audio_corrupt": 2} and summary["chunk_size"] == 0
    assert set(summary["modes"]) == {"ctc_greedy", "attention_rescoring"}


def test_empty_sets_bad_modes_and_decoding_errors_raise(model):
    with pytest.raises(ValueError, match="audio_missing"):
        evaluate_utterances(model, WordTokenizer(), EvalSet([], {"audio_missing": 3}), ["ctc_greedy"])
    with pytest.raises(ValueError, match="beam_me_up"):
        evaluate_utterances(model, WordTokenizer(), EvalSet(_utts([0.5])), ["beam_me_up"])
    torch.manual_seed(0)
    enc = build_encoder(pos_enc="abs_learned", max_len=8, input_dim=80, d_model=32, num_heads=2, num_layers=1,
                        ffn_dim=64, conv_kernel=3, causal=True, subsampling=4)
    short_table = AsrModel(enc, 8, 7, decoder_layers=1, decoder_heads=2, decoder_ffn_dim=64).eval()
    # One utterance past the position table fails the whole set: no WER over a silent subset.
    with pytest.raises(ValueError, match="max_len=8"):
        evaluate_utterances(short_table, WordTokenizer(), EvalSet(_utts([0.2, 2.0])), ["ctc_greedy"])
