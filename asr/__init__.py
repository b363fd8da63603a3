"""Streaming Conformer ASR toolkit: relative-attention encoders, chunk streaming, CTC/attention training."""
