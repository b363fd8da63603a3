"""Serving: the multi-stream recognizer (batched stream_step), endpointing, word timestamps, WebSocket server."""
