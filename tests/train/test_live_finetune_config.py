"""conf/experiment/live_finetune.yaml: the quickstart model, fine-tuned on live surroundings."""

from pathlib import Path

from hydra import compose, initialize_config_dir

CONF = Path(__file__).resolve().parents[2] / "conf"


def compose_experiment(name: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=[f"experiment={name}", "out_dir=/tmp/unused"])


def test_live_finetune_is_the_quickstart_model_with_the_gate_and_lookahead_on_and_its_source_tokenizer():
    live, base = compose_experiment("live_finetune"), compose_experiment("quickstart")
    assert live.experiment_name == "live_finetune"
    assert live.init_from == "exp/quickstart_rel_xl/checkpoints/avg3.ckpt"
    assert live.finetune.keep_architecture is False  # else the source's encoder, gate off, would be built
    assert live.model.encoder.online_cmn_gate_db > 0 and base.model.encoder.online_cmn_gate_db == 0
    assert live.model.encoder.chunk_lookahead > 0 and base.model.encoder.chunk_lookahead == 0
    # the gate and the lookahead add no tensor: every tensor of the source fits
    as_source = dict(live.model.encoder, online_cmn_gate_db=0.0, online_cmn_noise_snr_db=0.0, chunk_lookahead=0)
    assert as_source == dict(base.model.encoder)
    assert live.features == base.features
    assert live.data.data_dir == "data/synth_live" and live.data.tokenizer_path == "data/synth/tokenizer"
    assert live.data.feature_store == "data/synth_live/feature_store"
    assert live.trainer.max_steps < base.trainer.max_steps and live.optim.optimizer.lr < base.optim.optimizer.lr
    # it hears silence before the speech and chunk grids at every phase; the quickstart trains as before
    assert live.data.lead_in_prob > 0 and live.streaming.random_phase
    assert base.data.lead_in_prob == 0 and not base.streaming.random_phase
