"""Other toolkits' models and runtimes, in and out: the Wenet importer (``asr.interop.wenet``) and the
sherpa-onnx export (``asr.interop.sherpa_onnx``), with their checks."""
