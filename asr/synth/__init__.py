"""The embedded synthetic corpus: English sentences read by eSpeak NG, SVOX Pico and two neural voices,
the acoustic conditions applied at synthesis, the length probe set and the flite cross-engine split.

Only the quickstart, the ablation and the tests build it; it uses the pipeline (``asr.data``) to write
manifests and read audio, and nothing in ``asr.data`` imports it.
"""
