"""Measure the fbank frontends: CPU per second of audio and agreement with the whole-utterance frames.

Candidates (same options, one process, interleaved repeats, process CPU time):
  offline  knf         kaldi-native-fbank on the whole utterance (asr.data.features.FbankExtractor)
  offline  torchaudio  torchaudio.compliance.kaldi.fbank, float32
  online   knf         asr.data.features.FbankStream fed piece by piece (what the streaming
                       frontends and sherpa-onnx run)
  online   recompute   the previous streaming frontend: torchaudio fbank of the buffered audio at
                       every piece, keeping the window overlap (exact only with snip_edges=True)

Agreement is the largest |difference| of the log-mel frames against torchaudio in float64.

Usage:
    python scripts/bench_frontend.py
    python scripts/bench_frontend.py --seconds 20 --piece-ms 10 100 640 --repeats 5 --features sherpa
"""

from __future__ import annotations

import argparse
import time

import torch

from asr.data.features import LEGACY, SHERPA, SAMPLE_RATE, FbankExtractor, FbankStream


class RecomputeFbank:
    """The former streaming frontend (snip_edges=True only): fbank of the buffer at every piece,
    the frames it completes kept, the samples no later frame needs dropped."""

    def __init__(self, extractor: FbankExtractor) -> None:
        self.extractor = extractor
        self.buffer = torch.zeros(0)

    def accept(self, samples: torch.Tensor) -> torch.Tensor:
        self.buffer = torch.cat([self.buffer, samples])
        n = self.extractor.num_frames(self.buffer.numel())
        if n <= 0:
            return torch.zeros(0, self.extractor.num_mel_bins)
        feats = self.extractor(self.buffer)[:n]
        self.buffer = self.buffer[n * self.extractor.shift_samples:]
        return feats

    def finish(self) -> torch.Tensor:
        return torch.zeros(0, self.extractor.num_mel_bins)


def run_online(frontend, wave: torch.Tensor, piece: int) -> torch.Tensor:
    parts = [frontend.accept(wave[s:s + piece]) for s in range(0, wave.numel(), piece)]
    return torch.cat([*parts, frontend.finish()])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--seconds", type=float, default=10.0, help="audio length (default 10)")
    parser.add_argument("--piece-ms", type=float, nargs="+", default=[10.0, 100.0, 640.0],
                        help="online piece sizes in ms (default 10 100 640)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--features", choices=("legacy", "sherpa"), default="legacy")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    config = LEGACY if args.features == "legacy" else SHERPA
    gen = torch.Generator().manual_seed(0)
    # speech-like level: noise with a slow envelope, some exact zeros
    n = int(args.seconds * SAMPLE_RATE)
    envelope = (torch.sin(torch.arange(n) / 3000.0) + 1.0) * 0.05
    wave = torch.randn(n, generator=gen) * envelope
    wave[: SAMPLE_RATE // 4] = 0.0
    reference = FbankExtractor(config, "torchaudio")(wave.double())

    knf = FbankExtractor(config)
    torch_fbank = FbankExtractor(config, "torchaudio")
    candidates = {
        "offline knf": lambda: knf(wave),
        "offline torchaudio": lambda: torch_fbank(wave),
    }
    for ms in args.piece_ms:
        piece = int(ms * SAMPLE_RATE / 1000)
        candidates[f"online knf {ms:g} ms"] = lambda p=piece: run_online(FbankStream(config), wave, p)
        if config.snip_edges:
            candidates[f"online recompute {ms:g} ms"] = lambda p=piece: run_online(
                RecomputeFbank(torch_fbank), wave, p)
    cpu = {name: 0.0 for name in candidates}
    out = {}
    for _ in range(args.repeats):
        for name, fn in candidates.items():
            start = time.process_time()
            out[name] = fn()
            cpu[name] += time.process_time() - start
    print(f"features={args.features} audio={args.seconds:g} s repeats={args.repeats} (process CPU, 1 thread)")
    print(f"{'frontend':<28} {'ms CPU / s audio':>16} {'frames':>7} {'max |diff| vs float64':>22} {'== offline knf':>15}")
    for name in candidates:
        feats = out[name]
        diff = (feats.double() - reference).abs().max().item() if feats.shape == reference.shape else float("nan")
        same = feats.shape == out["offline knf"].shape and torch.equal(feats, out["offline knf"])
        ms = 1000 * cpu[name] / args.repeats / args.seconds
        print(f"{name:<28} {ms:16.3f} {feats.shape[0]:7d} {diff:22.2e} {str(same):>15}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
