"""Pure-PyTorch model code: position schemes, attention, Conformer encoder, decoders."""

from asr.model.encoder import ConformerEncoder, build_encoder
from asr.model.positions import POSITION_SCHEMES

__all__ = ["POSITION_SCHEMES", "ConformerEncoder", "build_encoder"]
