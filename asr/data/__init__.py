"""Data pipeline: Lhotse manifests and importers, the synthetic eSpeak corpus,
audio loading, fbank features, tokenizers, augmentation and the Lightning DataModule."""
