"""Third-party kernels under a compile-only target with no GPU: the machine view.

FLA probes the GPU through Triton's driver (``fla/utils/hardware.py``: the backend at import,
``get_device_properties`` at call time). Under ``compile_only(..., machine_view=True)`` (what
``zerojit record`` / ``exec`` run programs under) those probes see this machine as a run without
zerojit does, and only Triton's compilation and launches see the target. References: what
``triton.runtime.driver.active`` gives here outside any compile-only block, Triton's own
``CompiledKernel`` of a dry launch (its target and its cubin), the JIT monitor's own counts.

The end-to-end test records FLA's ``chunk_gated_delta_rule`` and Liger's RMSNorm (the installed
packages, test dependencies) with ``zerojit record --target cuda:90`` and runs ``zerojit exec``
from a fresh Triton cache in error mode: a compile-only recording holds no autotune choices, and
exec gives each tuning key the default policy (zerojit.recorded_tuning) instead of a benchmark.
About 70-120 s on 2 cores (every config of FLA's autotuners compiles once in the recording and
once in exec's warm-up), so it runs with Triton 3.6.0 only (the release tested on the GPU).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from _cli import run_zerojit as _zerojit

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

import torch
import triton
import triton.language as tl

from zerojit import triton_compat as _tc
from zerojit.compile_only import CompileOnlyDriver, active_compile_only, compile_only, current_target_name

SRC = Path(__file__).resolve().parents[1] / "src"
DriverConfig = type(triton.runtime.driver)  # Triton's own class, before any block swaps it


@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def _store_kernel(ptr):
    tl.store(ptr, 1)


def _seen_by_a_probe():
    """What a library's probe gets from ``triton.runtime.driver.active``: the driver, or the
    error's type and message."""
    try:
        return triton.runtime.driver.active
    except Exception as e:
        return (type(e), str(e))


def _in_a_thread(fn):
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join(60)
    return out[0]


def test_machine_view_probes_see_this_machine_and_launches_the_target():
    machine = _seen_by_a_probe()  # the reference: no compile-only block (no GPU here: Triton's error)
    before = _tc.peek_driver()
    x, y = torch.arange(64, dtype=torch.float32), torch.empty(64)
    with compile_only("cuda:90", machine_view=True) as drv:
        assert _seen_by_a_probe() == machine
        assert _in_a_thread(_seen_by_a_probe) == machine
        # zerojit's own reads still name the target
        assert active_compile_only() is drv and _tc.active_driver() is drv and current_target_name() == "cuda:90"
        assert _tc.current_target() == _tc.gpu_target("cuda", 90, 32)
        compiled = _copy_kernel[(1,)](x, y, 64, BLOCK=64)  # a dry launch: compiles, runs nothing
        assert compiled.metadata.target == _tc.gpu_target("cuda", 90, 32)
        assert "cubin" in compiled.asm and ".target sm_90a" in compiled.asm["ptx"]
        with _tc.target_scope():
            assert triton.runtime.driver.active is drv
        assert _seen_by_a_probe() == machine  # and out of the scope again
    assert type(triton.runtime.driver) is DriverConfig and _tc.peek_driver() is before
    assert "_zerojit_machine" not in vars(triton.runtime.driver)
    assert _seen_by_a_probe() == machine


def test_a_zerojit_kernel_made_before_the_block_dry_launches_under_the_machine_view():
    """A zerojit kernel class binds Triton's ``JITFunction.run`` when it is created (at import,
    before any block): its dry launch still compiles for the target (reference: the variant
    Triton filed for the compile-only device, and its target)."""
    from zerojit.examples.scale_add import scale_add

    x, bias, out = torch.randn(100), torch.randn(4), torch.empty(100)
    with compile_only("cuda:90", machine_view=True) as drv:
        scale_add(x=x, bias=bias, out=out, period=4, scale=2.0)
        variants = list(_tc.kernel_cache(scale_add.kernel, drv.device).values())
    assert variants and all(v.metadata.target == _tc.gpu_target("cuda", 90, 32) for v in variants)


def test_machine_view_nests_and_is_undone_on_an_exception():
    machine = _seen_by_a_probe()
    before = _tc.peek_driver()
    with pytest.raises(ZeroDivisionError):
        with compile_only("cuda:90") as outer:  # no view: everyone sees cuda:90
            assert type(triton.runtime.driver) is DriverConfig
            assert triton.runtime.driver.active is outer and _in_a_thread(lambda: triton.runtime.driver.active) is outer
            with compile_only("cuda:80", machine_view=True) as inner:
                assert type(triton.runtime.driver) is not DriverConfig
                assert triton.runtime.driver.active is outer  # the inner block's "machine": the outer target
                assert _tc.active_driver() is inner
                with compile_only("cuda:90", machine_view=True) as innermost:
                    assert triton.runtime.driver.active is outer and _tc.active_driver() is innermost
                    with compile_only("cuda:90"):  # no view inside a view: Triton's class again
                        assert type(triton.runtime.driver) is DriverConfig
                    assert type(triton.runtime.driver) is not DriverConfig
                assert triton.runtime.driver.active is outer and _tc.active_driver() is inner
                1 / 0
    assert type(triton.runtime.driver) is DriverConfig and _tc.peek_driver() is before
    assert "_zerojit_machine" not in vars(triton.runtime.driver)
    assert _seen_by_a_probe() == machine
    assert isinstance(outer, CompileOnlyDriver) and isinstance(inner, CompileOnlyDriver)


def test_a_compile_in_another_thread_compiles_for_the_target():
    """Triton's async compile mode compiles in an executor thread, which the launch's scope does
    not reach: ``triton.compile`` itself enters it (here: called with no target, in a thread)."""
    src = _tc.ast_source(_store_kernel, {"ptr": "*i32"})
    with compile_only("cuda:90", machine_view=True):
        compiled = _in_a_thread(lambda: triton.compile(src))
    assert compiled.metadata.target == _tc.gpu_target("cuda", 90, 32)


PROBING_MODULE = '''
import triton
import triton.language as tl

try:  # a library's probe at import, as FLA's get_available_device()
    SEEN = triton.runtime.driver.active.get_current_target().backend
except RuntimeError:
    SEEN = "no driver"


@triton.jit
def probed_kernel(ptr):
    tl.store(ptr, 1)
'''

WORKER = '''
import json, sys
from zerojit._compile_worker import Worker

w = Worker({"sys_path": sys.path, "cache_dir": sys.argv[1], "target": ("cuda", 90, 32)})
fn = w.function("probing_module:probed_kernel")
compiled = w.tc.compile_source(w.tc.ast_source(fn, {"ptr": "*i32"}), w.target)
import probing_module
print(json.dumps([probing_module.SEEN, compiled.metadata.target.arch, "cubin" in compiled.asm]))
'''


def test_a_compile_worker_imports_a_probing_module_as_this_machine_does(tmp_path):
    """A warm-up's compile worker imports the kernel's module (here after its compile-only driver
    is set) as a program here would: its probe sees this machine; its compile, the target."""
    (tmp_path / "probing_module.py").write_text(PROBING_MODULE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(SRC)])}
    env.pop("TRITON_INTERPRET", None)
    plain = subprocess.run([sys.executable, "-c", "import probing_module; print(probing_module.SEEN)"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr
    worker = subprocess.run([sys.executable, "-c", WORKER, str(tmp_path / "cache")], env=env, capture_output=True,
                            text=True, timeout=300)
    assert worker.returncode == 0, worker.stderr[-3000:]
    assert json.loads(worker.stdout.splitlines()[-1]) == [plain.stdout.strip(), 90, True]


# -- FLA and Liger, recorded and exec'd ----------------------------------------------------------

fla_chunk = pytest.importorskip("fla.ops.gated_delta_rule")
liger_rms = pytest.importorskip("liger_kernel.ops.rms_norm")

APP = '''
import torch
from fla.ops.gated_delta_rule import chunk_gated_delta_rule
from liger_kernel.ops.rms_norm import LigerRMSNormFunction

# compile-only: launches are dry, outputs are not computed (nothing here reads them)
B, H, K, V = 1, 2, 64, 64
for T in (64, 100):
    q, k = torch.randn(B, T, H, K, dtype=torch.bfloat16), torch.randn(B, T, H, K, dtype=torch.bfloat16)
    v = torch.randn(B, T, H, V, dtype=torch.bfloat16)
    g = torch.nn.functional.logsigmoid(torch.randn(B, T, H, dtype=torch.float32))
    beta = torch.rand(B, T, H, dtype=torch.bfloat16)
    chunk_gated_delta_rule(q, k, v, g, beta)
    LigerRMSNormFunction.apply(torch.randn(T, 256, dtype=torch.bfloat16), torch.ones(256, dtype=torch.bfloat16), 1e-6)
print("app done")
'''

#: The Triton kernels FLA's chunk_gated_delta_rule forward (no l2norm, no gate in the kernel) and
#: Liger's RMSNorm forward launch, read from their modules (the reference, independent of zerojit).
EXPECTED_KERNELS = {
    "fla.ops.utils.cumsum:chunk_local_cumsum_scalar_kernel",
    "fla.ops.gated_delta_rule.chunk_fwd:chunk_gated_delta_rule_fwd_kkt_solve_kernel",
    "fla.ops.gated_delta_rule.wy_fast:recompute_w_u_fwd_kernel",
    "fla.ops.common.chunk_delta_h:chunk_gated_delta_rule_fwd_kernel_h_blockdim64",
    "fla.ops.common.chunk_o:chunk_fwd_kernel_o",
    "liger_kernel.ops.rms_norm:_rms_norm_forward_kernel",
}




@pytest.mark.skipif(triton.__version__ != "3.6.0", reason="FLA compiles for minutes on 2 cores: CI runs it with "
                    "Triton 3.6.0, the release tested on the GPU")
def test_fla_chunk_gated_delta_rule_and_liger_rms_norm_record_and_exec_without_a_gpu(tmp_path):
    import importlib

    for name in EXPECTED_KERNELS:  # each a triton kernel of the installed packages
        module, _, qualname = name.partition(":")
        assert _tc.unwrap_jit_function(getattr(importlib.import_module(module), qualname)) is not None, name
    (tmp_path / "app.py").write_text(APP)
    rec = _zerojit(["record", "--target", "cuda:90", "-o", "m.json", "--", "python", "app.py"], tmp_path / "c1",
                   tmp_path)
    assert rec.returncode == 0, rec.stderr[-3000:]
    assert "app done" in rec.stdout
    manifest = json.loads((tmp_path / "m.json").read_text())
    recorded = {f"{k['module']}:{k['qualname']}": len(k["specializations"]) for k in manifest["kernels"]}
    assert set(recorded) == EXPECTED_KERNELS
    assert manifest["target"] == "cuda:90"

    ex = _zerojit(["exec", "--manifest", "m.json", "--target", "cuda:90", "--jit-monitor-mode", "error",
                   "--no-generic", "--no-progress", "--json", "r.json", "--", "python", "app.py"],
                  tmp_path / "c2", tmp_path)  # a fresh cache: the warm-up compiles everything
    assert ex.returncode == 0, ex.stderr[-3000:]
    assert "app done" in ex.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["runtime_compiles"] == 0 and report["blocked"] == 0 and report["exit_status"] == 0
    assert report["benchmarks"] == 0 and report["untuned_tuning_keys"] > 0  # the default policy, no benchmark
    assert "default policy" in ex.stderr
    assert report["launches"] >= 2 * len(EXPECTED_KERNELS)  # each kernel launched for both T, monitored
    warm = report["warmup"]
    assert warm["failures"] == [] and warm["skipped"] == []
    assert {k: len(v["keys"]) for k, v in warm["kernels"].items()} == {k.replace(":", "."): n
                                                                        for k, n in recorded.items()}
