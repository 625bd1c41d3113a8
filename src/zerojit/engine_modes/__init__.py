"""The modes engines run kernels in, on top of the contract: ``torch.compile`` (custom ops).

:mod:`zerojit.engine_modes.custom_ops` exposes a contract kernel's launcher as a
``torch.library.custom_op`` (``torch.ops.zerojit.<kernel name>``), so a compiled region calls it
without a graph break and still launches zerojit's warmed variants (docs/engine-modes.md).
"""

from .custom_ops import ZerojitOp, as_custom_op

__all__ = ["ZerojitOp", "as_custom_op"]
