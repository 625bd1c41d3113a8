"""A fresh user's findings on the engine modes' inputs (issue 32): optional schema types,
``as_custom_op``'s argument checks, a launcher that reads tensor values while traced. Fast: no
kernel compiles (fake tensors and schemas only). docs/engine-modes.md.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1 (Dynamo cannot trace the interpreter)",
                allow_module_level=True)

import torch

from zerojit import torch_compat


def test_an_optional_annotation_gives_an_optional_schema_type_and_none_passes():
    """TunedScale's ``scale: float | None`` (no default) is ``float? scale``; the op takes
    scale=None through torch's argument parser (its fake implementation, on fake tensors)."""
    from zerojit.engine_modes import as_custom_op
    from zerojit.examples.tuned_scale import TunedScale

    op = as_custom_op(TunedScale(), "tuned_scale_optional", mutates_args=("out",),
                      restore=lambda outs, inputs: inputs["out"])
    assert op.schema == "(Tensor x, Tensor(a!) out, float? scale) -> ()"
    with torch_compat.fake_mode() as mode:
        x = mode.from_tensor(torch.empty(100))
        out = mode.from_tensor(torch.empty(100))
        assert op(x=x, out=out, scale=None) is out
        assert op(x=x, out=out, scale=2.0) is out
