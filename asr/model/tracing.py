"""Whether the model is being traced by torch.compile or torch.export.

While tracing, the model takes its plain-op forms instead of the eager paths that a graph
compiler cannot follow: the in-place custom autograd Functions of the attention scorers
(the compiler plans its own buffers and fuses mask, softmax and their backward), checks
that read a tensor's value on the host, and caches of tensors (a tensor made while
tracing belongs to the tracer). Every such fork computes the same numbers; the tests in
``tests/model/test_compiled.py`` compare the compiled model with the eager one.
"""

from __future__ import annotations

import torch


def tracing() -> bool:
    """True while torch.compile or torch.export traces the calling code."""
    return torch.compiler.is_compiling() or torch.compiler.is_exporting()
