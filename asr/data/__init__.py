"""Data pipeline every corpus runs through: Lhotse manifests and importers, Shar shards and the lazy
loader, audio loading, fbank features, tokenizers, CMVN, augmentation, batching and the Lightning
DataModule. The embedded synthetic corpus that feeds it lives in ``asr.synth``."""
