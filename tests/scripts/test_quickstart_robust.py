"""The quickstart's benchmark reports are reused only for the checkpoint they measured."""

import json

from asr import quickstart


def test_a_report_is_reused_only_for_its_checkpoint(tmp_path):
    path = tmp_path / "robust.json"
    assert quickstart.reusable_report(path, tmp_path / "a.ckpt") is None  # nothing measured yet
    report = {"config": {"checkpoint": str(tmp_path / "a.ckpt")}, "conditions": ["clean"],
              "alone": {"clean": {"wer": 0.2}}}
    path.write_text(json.dumps(report))
    assert quickstart.reusable_report(path, tmp_path / "a.ckpt") == report
    assert quickstart.reusable_report(path, tmp_path / "b.ckpt") is None
