"""Corpus makers and measurements used only by the benchmark scripts (scripts/bench_*.py)."""
