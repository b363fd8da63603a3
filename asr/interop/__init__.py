"""Other toolkits' formats and runtimes: exports that other runtimes run (sherpa-onnx)."""
