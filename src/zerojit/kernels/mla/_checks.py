"""Declarative input checks shared by the MLA kernel launchers (see :mod:`zerojit.inputs`).

The generic checks (tensors, ints, row strides) live in :mod:`zerojit.inputs`; what is left here
is the one group several MLA kernels share: the decode-context-parallel triple.
"""

from __future__ import annotations

from zerojit.inputs import INT32_MAX, IntArg, Require

__all__ = ["DCP"]

#: Checks of a decode-context-parallel triple (docs KERNELS.md, "DCP"): S = ``dcp_size`` and
#: I = ``dcp_interleave`` ints in ``[1, 2**31)``, the rank r = ``dcp_rank`` an int in ``[0, S)``,
#: reported in that order. Splice into a launcher's checks: ``@checked_launcher(..., *DCP, ...)``.
DCP = (
    IntArg("dcp_size", 1, INT32_MAX),
    IntArg("dcp_interleave", 1, INT32_MAX),
    Require("dcp_rank", "is_int(dcp_rank) and 0 <= dcp_rank < dcp_size",
            "must be an int in [0, dcp_size={dcp_size}), got {dcp_rank!r}"),
)
