"""Fine-tuning with init_from: shared token rows kept bit for bit, new rows re-initialized, a frozen
encoder unchanged, an encoder learning rate of its own, exact resume of a fine-tuning run."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hydra import compose, initialize_config_dir

from asr.data.tokenizer import load_tokenizer, train_sentencepiece, write_char_units
from asr.model.asr_model import build_asr_model
from asr.train.checkpoint import load_model, model_state_dict
from asr.train.init_from import Source, load_source_weights, pieces, read_source
from asr.train.run import train

from tiny_corpus import CONF, WORDS, make_tiny_corpus, tiny_overrides


def char_tokenizer(folder, texts):
    return load_tokenizer(write_char_units(texts, folder))


def small_model(tokenizer, seed):
    torch.manual_seed(seed)
    return build_asr_model(
        vocab_size=tokenizer.vocab_size, sos_eos_id=tokenizer.sos_eos_id,
        encoder_kwargs=dict(pos_enc="rel_xl", input_dim=8, d_model=16, num_heads=2, num_layers=1, ffn_dim=32,
                            conv_kernel=3),
        decoder_layers=1, r2l_decoder_layers=1, decoder_heads=2, decoder_ffn_dim=32,
    )


def test_shared_rows_kept_bit_for_bit_and_new_rows_reinitialized(tmp_path):
    old_tok = char_tokenizer(tmp_path / "old", ["abc de"])  # <blank> <unk> a b c d e ▁ <sos/eos>
    new_tok = char_tokenizer(tmp_path / "new", ["cde xy"])  # shares c d e ▁ and the specials
    source_model = small_model(old_tok, seed=1)
    source = Source(tmp_path, {}, source_model.state_dict(), old_tok)
    fresh = small_model(new_tok, seed=2)
    before = {k: v.clone() for k, v in fresh.state_dict().items()}
    report = load_source_weights(fresh, source, new_tok)
    after = fresh.state_dict()
    old_ids = {old_tok.id_to_piece(i): i for i in range(old_tok.vocab_size)}
    for name in ("ctc_proj.weight", "ctc_proj.bias", "decoder.embed.weight", "decoder.output.weight",
                 "decoder.output.bias", "r2l_decoder.embed.weight", "r2l_decoder.output.weight"):
        assert name in report.rows_kept
        for i in range(new_tok.vocab_size):
            piece = new_tok.id_to_piece(i)
            if piece in old_ids:  # bit for bit
                assert torch.equal(after[name][i], source_model.state_dict()[name][old_ids[piece]]), (name, piece)
            else:  # the fresh initialization, untouched
                assert torch.equal(after[name][i], before[name][i]), (name, piece)
    kept, total = report.rows_kept["ctc_proj.weight"]
    assert (kept, total) == (7, 9)  # <blank> <unk> c d e ▁ <sos/eos> of those and x, y
    for name, value in after.items():
        if name not in report.rows_kept:
            assert torch.equal(value, source_model.state_dict()[name]), name
    assert not report.reinitialized and not report.unused
    assert any("7 of 9 rows kept" in line for line in report.lines())


def reordered_sentencepiece(model_path, out_dir):
    """The same sentencepiece model with its pieces in reverse order (the two specials stay at ids 0 and 1):
    each piece keeps its score and type, so the same text is split into the same pieces, with other ids."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model_path.read_bytes())
    pieces = [sentencepiece_model_pb2.ModelProto.SentencePiece() for _ in proto.pieces]
    for piece, copied in zip(pieces, proto.pieces):
        piece.CopyFrom(copied)
    del proto.pieces[2:]
    proto.pieces.extend(pieces[2:][::-1])
    out_dir.mkdir()
    (out_dir / model_path.name).write_bytes(proto.SerializeToString())
    return out_dir / model_path.name


@pytest.mark.parametrize("kind", ["sentencepiece", "units"])
def test_the_same_pieces_in_another_order_are_copied_by_piece(tmp_path, kind):
    if kind == "sentencepiece":
        old_path = train_sentencepiece(["the cat sat on the mat", "a dog on a log"] * 10, tmp_path / "old", 24,
                                       model_type="unigram")
        new_path = reordered_sentencepiece(old_path, tmp_path / "new")
    else:
        old_path = write_char_units(["abc de"], tmp_path / "old")
        units = [line.split()[0] for line in old_path.read_text(encoding="utf-8").splitlines()]
        new_path = tmp_path / "new" / "units.txt"
        new_path.parent.mkdir()
        reordered = units[:2] + units[2:-1][::-1] + units[-1:]
        new_path.write_text("".join(f"{u} {i}\n" for i, u in enumerate(reordered)), encoding="utf-8")
    old_tok, new_tok = load_tokenizer(old_path), load_tokenizer(new_path)
    assert sorted(pieces(old_tok)) == sorted(pieces(new_tok)) and pieces(old_tok) != pieces(new_tok)
    if kind == "sentencepiece":  # the same split into pieces, other ids
        text = "the dog sat on a mat"
        assert [old_tok.id_to_piece(i) for i in old_tok.encode(text)] == \
            [new_tok.id_to_piece(i) for i in new_tok.encode(text)] and old_tok.encode(text) != new_tok.encode(text)
    source_model = small_model(old_tok, seed=1)
    fresh = small_model(new_tok, seed=2)
    report = load_source_weights(fresh, Source(tmp_path, {}, source_model.state_dict(), old_tok), new_tok)
    old_ids = {p: i for i, p in enumerate(pieces(old_tok))}
    source, after = source_model.state_dict(), fresh.state_dict()
    for name, (kept, total) in report.rows_kept.items():
        assert kept == total == new_tok.vocab_size
        for i, piece in enumerate(pieces(new_tok)):
            assert torch.equal(after[name][i], source[name][old_ids[piece]]), (name, piece)
    assert "ctc_proj.weight" in report.rows_kept and not report.reinitialized


def test_mismatched_shapes_are_reinitialized_with_the_reason(tmp_path):
    tok = char_tokenizer(tmp_path / "t", ["abc"])
    source = Source(tmp_path, {}, {**small_model(tok, 1).state_dict(), "extra.weight": torch.ones(2)}, tok)
    target = build_asr_model(vocab_size=tok.vocab_size, sos_eos_id=tok.sos_eos_id,
                             encoder_kwargs=dict(input_dim=8, d_model=16, num_heads=2, num_layers=1, ffn_dim=64,
                                                 conv_kernel=3),
                             decoder_layers=1, decoder_heads=2, decoder_ffn_dim=32)
    report = load_source_weights(target, source, tok)
    assert "shape (32, 16) in the source, (64, 16) here" in report.reinitialized["encoder.blocks.0.ff_in.net.0.weight"]
    assert "extra.weight" in report.unused and any(u.startswith("r2l_decoder.") for u in report.unused)


def test_read_source_refuses_what_is_not_a_checkpoint(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        read_source(tmp_path / "missing.ckpt")
    torch.save({"weights": torch.ones(2)}, tmp_path / "plain.pt")
    with pytest.raises(ValueError, match="not a checkpoint of this toolkit"):
        read_source(tmp_path / "plain.pt")


# ------------------------------------------------------------------ through train(cfg)

@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_tiny_corpus(tmp_path_factory.mktemp("corpus"))


def compose_run(corpus, out, *extra):
    deterministic = ["model.encoder.dropout=0.0", "model.decoder_dropout=0.0", "data.spec_augment=false",
                     "optim.scheduler.total_steps=6", "trainer.val_check_interval=3",
                     "trainer.check_val_every_n_epoch=null", "trainer.limit_val_batches=1", "trainer.max_epochs=-1"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=[*tiny_overrides(corpus, out), *deterministic, *extra])


@pytest.fixture(scope="module")
def source_ckpt(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("source")
    train(compose_run(corpus, out, "trainer.max_steps=3"))
    return out / "checkpoints" / "last.ckpt"


@pytest.fixture(scope="module")
def new_tokenizer(tmp_path_factory):
    # Other units than the corpus's own tokenizer: some letters gone, some new.
    return write_char_units([" ".join(WORDS[:3]) + " zulu xray"], tmp_path_factory.mktemp("tok")).parent


def test_frozen_encoder_is_unchanged_and_the_rest_moves(corpus, source_ckpt, new_tokenizer, tmp_path):
    out = tmp_path / "ft"
    train(compose_run(corpus, out, f"init_from={source_ckpt}", f"data.tokenizer_path={new_tokenizer}",
                      "finetune.freeze_encoder_steps=3", "trainer.max_steps=3"))
    source = read_source(source_ckpt).state_dict
    tuned, tokenizer, _ = load_model(out / "checkpoints" / "last.ckpt")
    assert pieces(tokenizer) != pieces(read_source(source_ckpt).tokenizer)
    state = tuned.state_dict()
    encoder = [k for k in state if k.startswith("encoder.")]
    assert encoder and all(torch.equal(state[k], source[k]) for k in encoder)  # bit for bit after 3 steps
    assert not torch.equal(state["decoder.layers.0.ffn.0.weight"], source["decoder.layers.0.ffn.0.weight"])


def test_encoder_learning_rate_is_its_own_group(corpus, source_ckpt, tmp_path):
    out = tmp_path / "lr"
    train(compose_run(corpus, out, f"init_from={source_ckpt}", "finetune.encoder_lr=1e-5", "trainer.max_steps=1"))
    saved = torch.load(out / "checkpoints" / "last.ckpt", weights_only=True)
    groups = saved["optimizer_states"][0]["param_groups"]
    assert [g["initial_lr"] for g in groups] == [1e-5, pytest.approx(3e-3)]
    assert saved["hyper_parameters"]["finetune"]["encoder_lr"] == 1e-5


def test_resumed_finetuning_run_is_exact(corpus, source_ckpt, new_tokenizer, tmp_path):
    common = (f"init_from={source_ckpt}", f"data.tokenizer_path={new_tokenizer}", "finetune.freeze_encoder_steps=4",
              "finetune.encoder_lr=1e-3")
    train(compose_run(corpus, tmp_path / "straight", *common, "trainer.max_steps=6"))
    train(compose_run(corpus, tmp_path / "split", *common, "trainer.max_steps=3"))
    last = tmp_path / "split" / "checkpoints" / "last.ckpt"
    train(compose_run(corpus, tmp_path / "split", *common, "trainer.max_steps=6", f"ckpt_path={last}"))
    straight = model_state_dict(torch.load(tmp_path / "straight" / "checkpoints" / "last.ckpt", weights_only=True))
    resumed = model_state_dict(torch.load(last, weights_only=True))
    assert torch.load(last, weights_only=True)["global_step"] == 6
    for name, value in straight.items():
        assert torch.equal(value, resumed[name]), name


def test_the_run_adopts_the_source_frames_cmvn_and_loss_weights_unless_the_command_line_sets_them(tmp_path):
    from asr.data.features import LEGACY, SHERPA
    from asr.train.init_from import adopt_from_source

    tok = char_tokenizer(tmp_path / "t", ["abc"])
    u2pp = {"encoder_kwargs": {"input_dim": 80}, "r2l_decoder_layers": 1, "ctc_weight": 0.3, "reverse_weight": 0.3,
            "lsm_weight": 0.1}
    source = Source(tmp_path / "src.ckpt", u2pp, {}, tok, LEGACY.to_dict())
    plain = adopt_from_source(source, SHERPA, [])  # the experiment's sherpa preset, nothing on the command line
    assert plain.features == LEGACY and plain.source_cmvn
    assert plain.loss_weights == {"ctc_weight": 0.3, "reverse_weight": 0.3, "lsm_weight": 0.1}
    assert any("features: the source's (" in line and "snip_edges=True" in line for line in plain.lines())
    assert any("reverse_weight 0.3" in line for line in plain.lines())
    # An option set on the command line wins over the source's, the rest stays the source's.
    dithered = adopt_from_source(source, replace(SHERPA, dither=1.0),
                                 ["features.dither=1.0", "data.cmvn_file=mine.json", "model.reverse_weight=0.5"])
    assert dithered.features == replace(LEGACY, dither=1.0) and not dithered.source_cmvn
    assert dithered.loss_weights == {"ctc_weight": 0.3, "lsm_weight": 0.1}
    # A whole preset named on the command line is the run's, and the difference is said.
    chosen = adopt_from_source(source, SHERPA, ["features=sherpa"])
    assert chosen.features == SHERPA and "snip_edges: source True vs run False" in chosen.lines()[0]
    # No right-to-left decoder (or not its architecture): the run's own loss weights.
    assert adopt_from_source(Source(tmp_path, {**u2pp, "r2l_decoder_layers": 0}, {}, tok, None), LEGACY,
                             []).loss_weights == {}
    assert adopt_from_source(source, LEGACY, [], keep_architecture=False).loss_weights == {}
