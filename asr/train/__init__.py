"""Training: the LightningModule, ``train(cfg)``, schedules, dynamic chunks, checkpoints.

Import from the submodules (``asr.train.run.train``, ``asr.train.checkpoint.load_model``)
so that loading a checkpoint for decoding does not import Lightning's training stack.
"""
