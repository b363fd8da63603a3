"""Serving: a many-stream Recognizer (batched stream_step), endpointing, word timestamps, WebSocket server."""
