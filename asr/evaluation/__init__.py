"""Evaluation that runs a model: decode a split and score it (``split``), the memory guard that
plans its batches (``memory``), and the biasing benchmark's scoring (``biasing``).

It sits above the model (``asr.model``) and the searches (``asr.decode``): it encodes with a
model and hands the outputs to the searches, and nothing below imports it.
"""
