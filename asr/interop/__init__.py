"""Other toolkits' models in and out: the Wenet importer (``asr.interop.wenet``)."""
