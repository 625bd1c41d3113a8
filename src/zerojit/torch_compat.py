"""PyTorch's private surfaces that zerojit reads, in one place (as :mod:`zerojit.triton_compat` is for Triton).

Layer: triton facts (it imports no zerojit module). Everything zerojit takes from PyTorch outside
its public API goes through here: fake tensors (``torch._subclasses.fake_tensor``), the errors a
data-dependent read raises while tracing (``torch._subclasses``, ``torch.fx.experimental``), and
Dynamo's counters (``torch._dynamo.utils.counters``). Public APIs (``torch.library.custom_op``,
``torch.compile``, ``torch._dynamo.mark_dynamic``, documented) are used directly where they are
needed. Tested on PyTorch 2.11 and 2.13.

Nothing here imports those modules at zerojit's import: ``torch.fx.experimental.symbolic_shapes``
costs about half a second (sympy). :func:`is_fake` answers from ``sys.modules``: a process that
never imported the fake-tensor module has no fake tensor.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["is_fake", "any_fake", "fake_mode", "data_dependent_errors", "has_data_dependent_size", "dynamo_counts",
           "graph_break_reasons", "reset_dynamo"]

_FAKE_MODULE = "torch._subclasses.fake_tensor"


def is_fake(value: Any) -> bool:
    """``value`` is a ``FakeTensor`` (a tensor of metadata only, whose ``data_ptr()`` is no
    address: PyTorch answers 0 with a deprecation warning, or raises)."""
    module = sys.modules.get(_FAKE_MODULE)
    return module is not None and isinstance(value, module.FakeTensor)


def any_fake(values: Any) -> bool:
    """Any of ``values`` (an iterable) is a fake tensor (:func:`is_fake`)."""
    module = sys.modules.get(_FAKE_MODULE)
    if module is None:
        return False
    fake = module.FakeTensor
    return any(isinstance(v, fake) for v in values)


def fake_mode() -> Any:
    """A new ``FakeTensorMode`` (tensors made inside it carry metadata only); a context manager."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode()


def data_dependent_errors() -> tuple[type[BaseException], ...]:
    """What reading a fake tensor's values on the host raises while tracing (``int(t.max())``,
    ``t.item()``, ``t.tolist()``): ``DataDependentOutputException`` and
    ``GuardOnDataDependentSymNode``."""
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    return (DataDependentOutputException, DynamicOutputShapeException, GuardOnDataDependentSymNode)


def has_data_dependent_size(tensor: Any) -> bool:
    """A size of ``tensor`` is a symbol with no value to guard on (an unbacked size, ``u0``: the
    output of ``repeat_interleave`` without ``output_size``, of ``nonzero``, ...)."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    return any(s.__class__ is not int and free_unbacked_symbols(s) for s in tensor.shape)


def dynamo_counts() -> dict[str, int]:
    """Dynamo's counters since the last :func:`reset_dynamo`: ``graph_breaks`` (the sum of
    ``counters["graph_break"]``, one per distinct reason and place) and ``unique_graphs``
    (``counters["stats"]["unique_graphs"]``, the graphs Dynamo compiled)."""
    from torch._dynamo.utils import counters

    return {"graph_breaks": sum(counters["graph_break"].values()),
            "unique_graphs": counters["stats"]["unique_graphs"]}


def graph_break_reasons() -> list[str]:
    """The reasons of the graph breaks Dynamo counted since the last :func:`reset_dynamo`."""
    from torch._dynamo.utils import counters

    return [str(reason) for reason in counters["graph_break"]]


def reset_dynamo() -> None:
    """Forget every compiled graph and clear Dynamo's counters (``torch._dynamo.reset()`` leaves
    the counters as they are)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
