"""The streaming frontend: audio pieces in, the model's input frames out.

Axis legend: n audio samples, T feature frames, F feature bins.

:class:`StreamingFrontend` runs the model's own fbank options (``asr.data.features.FeatureConfig``,
from the checkpoint) through :class:`~asr.data.features.FbankStream` (kaldi-native-fbank's online
fbank, the code sherpa-onnx runs), then the model's running-mean normalization when it has one.
The frames it returns over a whole stream, :meth:`~StreamingFrontend.finish` included, are the
frames ``FbankExtractor(config)`` computes from the whole audio, bit for bit.

Why kaldi-native-fbank and not torchaudio's fbank of the buffered audio at every piece (the
previous frontend): 3.6 against 36 ms of CPU a second of audio fed in 10 ms pieces, 1.9 against
4.0 in 100 ms pieces (``scripts/bench_frontend.py``); and with ``snip_edges=False`` the last
frames mirror the end of the audio, which a recompute on a growing buffer gets wrong until the
stream ends, while the online fbank holds them back until :meth:`finish`.
"""

from __future__ import annotations

import torch

from asr.data.features import FeatureConfig, FbankStream


class StreamingFrontend:
    """Feature frames of one stream, normalized as the model's ``forward`` normalizes a whole utterance.

    Args:
        config: the model's fbank options (None: ``asr.data.features.LEGACY``).
        online_cmn: the model's running-mean normalization (``encoder.online_cmn()``; None: off),
            applied to each frame once, as it is made.
    """

    def __init__(self, config: FeatureConfig | None = None, online_cmn=None) -> None:
        self.fbank = FbankStream(config)
        self.config = self.fbank.config
        self._norm = None if online_cmn is None else online_cmn.stream()

    @property
    def normalizes(self) -> bool:
        """The frames get a running normalization (the model has online CMN)."""
        return self._norm is not None

    def reset(self) -> None:
        """Start a new stream."""
        self.fbank.reset()
        self.reset_normalization()

    def reset_normalization(self) -> None:
        """Restart the running statistics from the model's prior (the fbank goes on)."""
        if self._norm is not None:
            self._norm.reset()

    def accept(self, samples: torch.Tensor) -> torch.Tensor | None:
        """samples (n,) float in [-1, 1] -> (T, F) new complete frames, or None when there are none yet."""
        return self._normalized(self.fbank.accept(samples.reshape(-1)))

    def finish(self) -> torch.Tensor | None:
        """End of the audio -> (T, F) the frames that waited for it (snip_edges=False), or None."""
        return self._normalized(self.fbank.finish())

    def normalize(self, feats: torch.Tensor) -> torch.Tensor:
        """(T, F) fbank frames (``self.fbank``'s, in stream order) -> normalized; the running statistics take them in.

        For callers that keep the raw frames to normalize them again after :meth:`reset_normalization`.
        """
        return feats if self._norm is None else self._norm.push(feats)

    def _normalized(self, feats: torch.Tensor) -> torch.Tensor | None:
        if feats.size(0) == 0:
            return None
        return self.normalize(feats)
