"""Chunk-streaming support: the typed encoder state carried between ``stream_step`` calls."""

from asr.streaming.state import LayerCache, StreamState

__all__ = ["LayerCache", "StreamState"]
