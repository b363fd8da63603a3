"""Ablation of the encoder's position schemes: train each, evaluate, report a table and plots.

Entry point: ``asr.cli.ablate`` (``scripts/ablate.py``). The pieces: :mod:`.training` (one training
subprocess per scheme), :mod:`.evaluate` (WER, RTF, parameters of a checkpoint),
:mod:`.runner` (phases, skip/resume, failure isolation), :mod:`.report` (with
:mod:`.report_sections`: "rel_shift or not" and the translation probe) and
:mod:`.plots` (outputs), :mod:`.curves` (learning curves from CSV logs).
"""
