"""The soak run, shortened: real-time streams reconnecting with a new hotword list each time; every final equals
offline decoding and nothing the server holds for connections or steps is left over or grows with them."""

from __future__ import annotations

import asyncio

import torch

from asr.bench.soak import SoakConfig, draw_lists, make_pairs, soak
from asr.data.features import SAMPLE_RATE
from asr.decode.options import DecodeOptions
from asr.decode.endpoint import EndpointConfig
from asr.serve.multi_stream import MultiStreamRecognizer
from tests.serve.helpers import noise

POOL = ["abc", "bad", "cab", "fed", "hag", "gafe", "dab", "bead", "face", "badge", "cafe", "deaf"]


def test_a_short_soak_serves_every_final_as_offline_and_leaves_nothing_behind(model, tokenizer):
    torch.set_num_threads(1)
    options = DecodeOptions(chunk_size=4, left_chunks=2, beam=3)
    waves = [noise(0.8 + 0.3 * i, i, SAMPLE_RATE) for i in range(3)]
    pairs = make_pairs(model, tokenizer, options, waves, draw_lists(POOL, count=4, size=4))
    assert len({p.hotwords for p in pairs}) == 4
    rec = MultiStreamRecognizer(model, tokenizer, options, endpoint=EndpointConfig(enabled=False), max_batch=4)
    config = SoakConfig(streams=4, seconds=5.0, warmup_s=2.0, sample_every_s=0.25)
    report = asyncio.run(asyncio.wait_for(soak(rec, pairs, config), timeout=120))
    assert report.connections > config.streams  # each client connected again, with the next list
    assert report.failed == [] and report.finals_equal == report.connections, report.lines()
    counters = report.counters
    assert counters["open connections"] == counters["sessions"] == counters["client addresses"] == 0
    assert counters["recognizer streams"] == 0
    assert 0 < counters["batch sizes kept"] <= 4 < counters["batched steps"]
    assert counters["hotword lists cached"] <= 4
    assert report.every_pair_s < report.wall_s and report.judged_from_s >= config.warmup_s
    assert report.after_warmup() and report.rss_mib[0][0] < 1.0
    lines = report.lines()
    assert lines[1] == f"finals == offline: {report.connections}/{report.connections}"
    assert "MiB/min" in lines[3]
