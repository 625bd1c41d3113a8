"""The coverage audit: warmed keys vs keys hit, misses and dead warm-ups; and ``zerojit audit``."""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

import torch
import triton
import triton.language as tl
from typer.testing import CliRunner

from _kernels import StoreN
from zerojit import JitWarmupRegistry, monitor
from zerojit.audit import CoverageAudit, build_audit
from zerojit.cli import app
from zerojit.kernel import LaunchSpec, TritonJitKernel, kernel_launcher
from zerojit.keyspace import choices, trace_dispatch
from zerojit.specialization import WarmupTensor

SRC = str(Path(__file__).resolve().parent.parent / "src")


@triton.jit(do_not_specialize=["n"])
def _audit_scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


class AuditScale(TritonJitKernel["AuditScale.CompileKey"]):
    kernel = _audit_scale_kernel

    @dataclass(frozen=True)
    class CompileKey:
        block: int

    def dispatch(self, *, block: int) -> "AuditScale.CompileKey":
        return self.CompileKey(block)

    def get_warmup_keys(self, *, blocks=(64,)) -> list:
        return trace_dispatch(self.dispatch)(block=choices(*blocks))

    def warmup_inputs(self, key) -> dict:
        return dict(x=WarmupTensor(torch.float32, (64,)), out=WarmupTensor(torch.float32, (64,)), block=key.block)

    @kernel_launcher(host_only=("block",))
    def __call__(self, *, x, out, block: int) -> LaunchSpec:
        return LaunchSpec(grid=(triton.cdiv(x.numel(), block),), kwargs=dict(n=x.numel(), BLOCK=block), returns=out)


scale, unregistered = AuditScale(), StoreN()


@pytest.fixture
def dry(compile_only_target):
    for fn in (_audit_scale_kernel, StoreN.kernel):
        fn.device_caches.clear()
    yield compile_only_target
    monitor.shutdown()
    for fn in (_audit_scale_kernel, StoreN.kernel):
        fn.device_caches.clear()


def test_audit_of_a_monitored_run(dry):
    monitor.configure("warn")
    registry = JitWarmupRegistry()
    with registry.activate():
        scale.register_warmup(blocks=(64, 128))
    report = registry.warmup(progress=False, target="cuda:90")
    mon = monitor.current()
    x, out = torch.zeros(256), torch.zeros(256)
    for _ in range(3):
        scale(x=x, out=out, block=64)  # hit x3
    # block=128 is never launched: a dead warm-up
    scale(x=x, out=out, block=256)  # runtime compile
    scale(x=x, out=out, block=256)  # then a hit of the runtime-compiled variant
    unregistered(x=torch.zeros(4, dtype=torch.int32), n=16)  # never warmed

    audit = build_audit(report, mon)
    assert not audit.ok and audit.runtime_compiles == 2 and audit.dead_warmups == 1
    k = audit.kernel("audit_scale")
    assert [(w.key, w.hits) for w in k.warmed] == [
        ("AuditScale.CompileKey(block=64)", 3), ("AuditScale.CompileKey(block=128)", 0)]
    assert [w.key for w in k.hit] == ["AuditScale.CompileKey(block=64)"]
    assert [w.key for w in k.dead] == ["AuditScale.CompileKey(block=128)"]
    assert k.hits == 3
    (miss,) = k.misses
    assert (miss.misses, miss.compiled, miss.disk_loads, miss.blocked, miss.hits) == (1, 1, 0, 0, 2)
    assert "BLOCK: constexpr 256" in miss.arguments
    assert miss.nearest_key == "AuditScale.CompileKey(block=128)"  # of 64 and 128 (one argument apart), the nearer
    assert miss.differences == ("BLOCK: warmed as constexpr 128, called as constexpr 256",)
    u = audit.kernel("store_n")
    assert u.warmed == () and u.misses[0].nearest_key is None and u.misses[0].hits == 1

    # a plain value: JSON round trip, same report passed or taken from the monitor
    again = CoverageAudit.from_dict(json.loads(audit.to_json()))
    assert again == audit
    assert build_audit(None, mon) == audit
    data = audit.to_dict()
    assert data["runtime_compiles"] == 2 and data["kernels"][0]["warmed"][0]["fields"] == {"block": 64}

    table = audit.table()
    lines = table.splitlines()
    assert lines[1].split() == ["kernel", "warmed", "hit", "dead", "hits", "misses", "compiled", "disk", "blocked"]
    assert lines[2].split() == ["audit_scale", "2", "1", "1", "3", "1", "1", "0", "0"]
    assert lines[3].split() == ["store_n", "0", "0", "0", "0", "1", "1", "0", "0"]
    # issue 20: a dead key shows what warming it cost
    assert re.search(r"dead  AuditScale\.CompileKey\(block=128\)  \(0 launches; \d+\.\d\d s of warm-up\)", table)
    assert "no key of this kernel was warmed" in table
    assert table.endswith("2 runtime compiles after warm-up; 1 dead warm-up key")


def test_clean_run_audit_is_ok(dry):
    monitor.configure("error")
    registry = JitWarmupRegistry()
    with registry.activate():
        scale.register_warmup(blocks=(64,))
    report = registry.warmup(progress=False)
    scale(x=torch.zeros(64), out=torch.zeros(64), block=64)
    audit = build_audit(report, monitor.current())
    assert audit.ok and audit.mode == "error" and audit.kernel("audit_scale").warmed[0].hits == 1
    assert "zero runtime compiles; 0 dead warm-up keys" in audit.table()
    with pytest.raises(KeyError, match="no kernel 'nope'"):
        audit.kernel("nope")


SCRIPT = textwrap.dedent('''
    import sys
    from dataclasses import dataclass
    import torch, triton, triton.language as tl
    from zerojit import JitWarmupRegistry
    from zerojit.compile_only import compile_only
    from zerojit.kernel import LaunchSpec, TritonJitKernel, kernel_launcher
    from zerojit.specialization import WarmupTensor

    @triton.jit
    def _script_scale_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, n, mask=offs < BLOCK)

    class ScriptScale(TritonJitKernel):
        kernel = _script_scale_kernel

        @dataclass(frozen=True)
        class CompileKey:
            block: int

        def dispatch(self, *, block):
            return self.CompileKey(block)

        def get_warmup_keys(self):
            return [self.CompileKey(64)]

        def warmup_inputs(self, key):
            return dict(x=WarmupTensor(torch.int32, (64,)), n=16, block=key.block)

        @kernel_launcher(host_only=("block",))
        def __call__(self, *, x, n, block):
            return LaunchSpec(grid=(1,), kwargs=dict(BLOCK=block))

    k = ScriptScale()
    with compile_only("cuda:90"):
        registry = JitWarmupRegistry()
        with registry.activate():
            k.register_warmup()
        registry.warmup(progress=False)
        x = torch.zeros(64, dtype=torch.int32)
        k(x=x, n=32, block=64)
        k(x=x, n=48, block=64)
        if "--miss" in sys.argv:
            k(x=x, n=32, block=128)
''')


def test_cli_audit_runs_a_script_and_sets_the_exit_status(tmp_path, monkeypatch):
    script = tmp_path / "serve.py"
    script.write_text(SCRIPT)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PYTHONPATH", SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    runner = CliRunner()

    res = runner.invoke(app, ["audit", "--json", str(tmp_path / "a.json"), "--", sys.executable, str(script), "--miss"])
    assert res.exit_code == 1, res.output
    assert "MISS" in res.output and "BLOCK: warmed as constexpr 64, called as constexpr 128" in res.output
    assert "1 runtime compile after warm-up" in res.output
    saved = CoverageAudit.from_dict(json.loads((tmp_path / "a.json").read_text()))
    k = saved.kernel("script_scale")
    assert k.warmed[0].hits == 2 and k.misses[0].compiled == 1 and k.misses[0].hits == 1

    res = runner.invoke(app, ["audit", "--", sys.executable, str(script)])
    assert res.exit_code == 0, res.output
    assert "zero runtime compiles" in res.output


def test_cli_audit_script_without_warmup(tmp_path):
    script = tmp_path / "nothing.py"
    script.write_text("print('no zerojit here')\n")
    res = CliRunner().invoke(app, ["audit", "--", sys.executable, str(script)])
    assert res.exit_code == 2 and "ran no zerojit warm-up" in res.output


def test_cli_audit_runs_a_bare_python_and_zerojit_with_this_install(tmp_path, monkeypatch):
    """A console script of a virtual environment that is not activated: PATH finds no python (or
    another one), yet ``audit -- python ...`` and ``audit -- zerojit ...`` run with this install."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # nothing is found on PATH
    script = tmp_path / "fails.py"
    script.write_text("import sys, torch\nsys.exit(3)\n")  # torch: this install's interpreter ran it
    res = CliRunner().invoke(app, ["audit", "--", "python", str(script)])
    assert res.exit_code == 3, res.output
    assert "the script exited with status 3 before it wrote an audit" in res.output
    res = CliRunner().invoke(app, ["audit", "--", "zerojit", "audit", "--", "python3", str(script)])
    assert res.exit_code == 3 and "cannot run" not in res.output, res.output


def test_the_audit_table_counts_in_the_singular_too():
    from zerojit.audit import CoverageAudit, KernelCoverage, RuntimeMiss, WarmedKey

    miss = RuntimeMiss(arguments="n: i32", misses=1, compiled=1, disk_loads=0, blocked=0, hits=1, nearest_key="K(1)")
    audit = CoverageAudit(kernels=(KernelCoverage(kernel="k", warmed=(WarmedKey(key="K(1)", hits=1),),
                                                  misses=(miss,), unwarmed_hits=(), hits=1),), direct=(), mode="warn")
    table = audit.table()
    assert "hit   K(1)  (1 launch)" in table
    assert "(1 miss: 1 compiled, 0 from disk cache, 0 blocked; 1 launch)" in table
    assert table.endswith("1 runtime compile after warm-up; 0 dead warm-up keys")


def test_a_miss_nearest_to_a_dead_recorded_key_says_the_run_left_the_recording_not_dispatch():
    """A raw kernel warmed from a manifest has no dispatch to disagree with its warm-up: its keys
    are the recorded launches, so a miss nearest to a dead one is a launch the recording did not
    make (the zerojit kernel beside it keeps the dispatch note)."""
    import dataclasses

    from zerojit.audit import KernelCoverage, RuntimeMiss, WarmedKey

    recorded = "RecordedKey(*fp32:D, *fp32:D, i32, =128)"
    miss = RuntimeMiss("n: i32 divisible-by-16", 1, 0, 0, 1, nearest_key=recorded,
                       differences=("n: warmed as not-divisible-by-16, called as divisible-by-16",))
    raw = KernelCoverage("kern.add_kernel", warmed=(WarmedKey("RecordedKey(*fp32:D, *fp32:D, =1, =128)", 2),
                                                    WarmedKey(recorded, 0)), misses=(miss,))
    contract = KernelCoverage("k", warmed=(WarmedKey("K(block=16)", 3), WarmedKey("K(block=32)", 0)),
                              misses=(dataclasses.replace(miss, nearest_key="K(block=32)"),))
    assert CoverageAudit(kernels=(raw,)).dead_notes() == [
        "a miss nearest to a dead recorded key (kern.add_kernel): this run launched the kernel in classes its "
        "recording did not (a raw kernel has no dispatch: its keys are the recorded launches); compare that MISS "
        "with its nearest recorded key, and record the program again with this workload"]
    notes = CoverageAudit(kernels=(raw, contract)).dead_notes()
    assert [n.split(":")[0] for n in notes] == ["a miss nearest to a dead key (k)",
                                                 "a miss nearest to a dead recorded key (kern.add_kernel)"]
    assert "may disagree" in notes[0] and "dispatch may disagree" not in notes[1]
