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


def _reads_lens_kernel():
    """A TunedScale whose launcher reads ``int(lens.max())`` on the host unless ``n`` is given."""
    from zerojit.examples.tuned_scale import TunedScale
    from zerojit.kernel import LaunchSpec, kernel_launcher

    class ReadsLens(TunedScale):
        @kernel_launcher(host_only=("lens",))
        def __call__(self, *, x: torch.Tensor, out: torch.Tensor, lens: torch.Tensor,
                     n: int | None = None) -> LaunchSpec:
            if n is None:
                n = int(lens.max())
            return LaunchSpec(lambda meta: (1,), dict(n=n, scale=None), out)

    return ReadsLens()


def test_a_launcher_reading_tensor_values_while_traced_is_told_to_declare_a_host_value():
    """No host_values declared: the traced call's error names the kernel, the tensor read and the
    None input that could carry the value, and says to declare it in host_values (not the checks)."""
    from zerojit.engine_modes import as_custom_op
    from zerojit.kernel import KernelInputError

    op = as_custom_op(_reads_lens_kernel(), "reads_lens", mutates_args=("out",),
                      restore=lambda outs, inputs: inputs["out"])
    x, out, lens = torch.empty(8), torch.empty(8), torch.tensor([3, 5])
    with pytest.raises(Exception) as failure:
        torch.compile(lambda x, o, l: op(x=x, out=o, lens=l), fullgraph=True, backend="eager")(x, out, lens)
    message = str(failure.value)
    assert "KernelInputError" in message or isinstance(failure.value, KernelInputError)
    assert "argument 'lens'" in message
    assert "the launcher of tuned_scale reads lens's values on the host during tracing" in message
    assert "int(lens.max())" in message and "(perhaps 'n')" in message
    assert "as_custom_op(..., host_values=(...))" in message and "its checks compare" not in message
    with torch_compat.fake_mode() as mode:  # given n, the same op traces
        fx, fout, flens = (mode.from_tensor(t) for t in (x, out, lens))
        assert op(x=fx, out=fout, lens=flens, n=8) is fout


def test_as_custom_op_refuses_bad_types_names_and_redefinitions_naming_the_argument():
    """types naming no input or no schema type, a name that is no plain identifier, and the same
    name again with another restore or types: each refused, naming the argument."""
    from zerojit.engine_modes import as_custom_op
    from zerojit.examples.tuned_scale import TunedScale
    from zerojit.kernel import KernelDefinitionError

    kernel = TunedScale()
    with pytest.raises(KernelDefinitionError, match=r"types names 'sclae', which is no input .*x, out, scale"):
        as_custom_op(kernel, "ts_bad_types", types={"sclae": "float?"})
    with pytest.raises(KernelDefinitionError, match=r"types\['scale'\] = 'double' is no schema type"):
        as_custom_op(kernel, "ts_bad_types", types={"scale": "double"})
    for bad in ("a.b", "ns::x", "", "1x", "class"):
        with pytest.raises(ValueError, match=f"name={bad!r} is no plain identifier"):
            as_custom_op(kernel, bad)
    for bad in (42, "tuned_scale", None):  # (not .name of the object first: an AttributeError)
        with pytest.raises(KernelDefinitionError, match=f"as_custom_op: {bad!r} has no zerojit launcher"):
            as_custom_op(bad)
    with pytest.raises(TypeError, match=r"mutates_args='out' is a str: pass a tuple of input names, "
                                        r"mutates_args=\('out',\)"):
        as_custom_op(kernel, "ts_str_mutates", mutates_args="out")  # (was: "'o' is no input")
    with pytest.raises(TypeError, match=r"host_values='scale' is a str"):
        as_custom_op(kernel, "ts_str_mutates", host_values="scale")
    with pytest.raises(TypeError, match=r"mutates_args=b'out' is a bytes"):
        as_custom_op(kernel, "ts_str_mutates", mutates_args=b"out")
    with pytest.raises(TypeError, match=r"mutates_args=None: pass a tuple of input names"):
        as_custom_op(kernel, "ts_str_mutates", mutates_args=None)
    with pytest.raises(TypeError, match=r"mutates_args='unknown' is not taken: name the tensor inputs"):
        as_custom_op(kernel, "ts_str_mutates", mutates_args="unknown")
    with pytest.raises(KernelDefinitionError, match=r"TunedScale is a kernel class: pass an instance \(TunedScale\(\)"):
        as_custom_op(TunedScale)
    keep = lambda outs, inputs: inputs["out"]  # noqa: E731
    op = as_custom_op(kernel, "ts_once", mutates_args=("out",), restore=keep, types={"scale": "float?"})
    assert as_custom_op(kernel, "ts_once", mutates_args=("out",), restore=keep, types={"scale": "float?"}) is op
    with pytest.raises(ValueError, match="already registered with another restore"):
        as_custom_op(kernel, "ts_once", mutates_args=("out",), restore=lambda outs, inputs: outs,
                     types={"scale": "float?"})
    with pytest.raises(ValueError, match="already registered with another types"):
        as_custom_op(kernel, "ts_once", mutates_args=("out",), restore=keep)
    assert not hasattr(torch.ops.zerojit, "ts_bad_types") and not hasattr(torch.ops.zerojit, "ts_str_mutates")


def test_the_compiled_step_benchmark_refuses_a_mode_its_backend_ignores():
    """``--mode reduce-overhead`` on cpu (backend aot_eager, which ignores torch.compile's mode):
    exit 2 with one line, before anything is built."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "compiled_step.py"), "--device", "cpu",
                           "--mode", "reduce-overhead"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(root / "src")})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "compiled_step: --mode reduce-overhead needs --backend inductor "
        "(backend aot_eager ignores torch.compile's mode)"]
