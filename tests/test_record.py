"""Kernels nobody rewrote: manifests, ``zerojit record``, ``warmup(manifest=...)``, ``zerojit exec``.

Compile-only (cuda:90): launches are dry launches. References are independent of the recorder:
the keys Triton's own ``JITFunction.run`` filed in its in-process cache, Triton's binder on a
``do_not_specialize`` twin of the kernel, and the reference runner's own audit.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from _cli import fresh_module, run_zerojit as _zerojit
import torch

from zerojit import JitMonitor, JitWarmupRegistry, RuntimeJitError
from zerojit.audit import build_audit
from zerojit.compile_only import compile_only
from zerojit.manifest import (KernelRecord, Manifest, ManifestError, RecordedKernel, RecordedKey, read_manifest,
                              write_manifest)
from zerojit.generalisation import bounded_together, growth, growth_report
from zerojit.recording import Recorder, count_raw_launches
from zerojit.triton_compat import TRITON_VERSION, bind, in_process_key, kernel_cache, param_specialization

SRC = Path(__file__).resolve().parents[1] / "src"

KERNELS = '''
import triton
import triton.language as tl


@triton.jit
def add_one_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)


@triton.jit(do_not_specialize=["n"], do_not_specialize_on_alignment=["x_ptr"])
def add_one_bounded_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2)], key=["n"])
@triton.jit
def autotuned_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2), triton.Config({"BLOCK": 128}, num_warps=4),
                          triton.Config({"BLOCK": 128}, num_warps=8)], key=["n"], cache_results=True)
@triton.jit
def tuned_three_ways_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.heuristics({"BLOCK": lambda args: 128 if args["n"] > 64 else 64})
@triton.jit
def heuristic_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
'''

# (n, launch options): two launches of one class, one of another, one with other options
LAUNCHES = [(64, {}), (100, {}), (64, {}), (64, {"num_warps": 2})]


@pytest.fixture
def kernels(tmp_path, monkeypatch):
    """A fresh module holding raw triton.jit kernels (importable by name, as a program's are)."""
    module = fresh_module(KERNELS, "zj_rec", tmp_path, monkeypatch)
    yield module
    sys.modules.pop(module.__name__, None)


def _launch_all(fn, dtype=torch.float32, launches=LAUNCHES):
    x, out = torch.zeros(128, dtype=dtype), torch.zeros(128, dtype=dtype)
    for n, options in launches:
        fn[(1,)](x, out, n, BLOCK=128, **options)
    return out


def _record(fn, launches=LAUNCHES) -> Manifest:
    recorder = Recorder().install()
    try:
        out = _launch_all(fn, launches=launches)
    finally:
        recorder.uninstall()
    assert torch.equal(out, torch.zeros(128))  # dry launches: nothing executed
    return recorder.manifest(["app.py"])


def test_recorder_keeps_each_specialization_triton_launched(kernels, compile_only_target):
    manifest = _record(kernels.add_one_kernel)
    assert manifest.triton_version == TRITON_VERSION and manifest.target == "cuda:90"
    [k] = manifest.kernels
    fn = kernels.add_one_kernel
    assert (k.module, k.qualname, k.source_hash) == (kernels.__name__, "add_one_kernel", fn.cache_key)
    assert k.parameters == ("x_ptr", "out_ptr", "n", "BLOCK") and k.constexprs == ("BLOCK",)
    assert [s.launches for s in k.specializations] == [2, 1, 1]
    assert [dict(s.values) for s in k.specializations] == [{"n": 16}, {"n": 17}, {"n": 16}]
    assert [dict(s.options) for s in k.specializations] == [{}, {}, {"num_warps": 2}]
    # Independent reference: what Triton's run filed in its in-process cache for those dry launches.
    cache = kernel_cache(fn, compile_only_target.device)
    x = torch.zeros(128)
    expected = set()
    for s, (n, options) in zip(k.specializations, [LAUNCHES[0], LAUNCHES[1], LAUNCHES[3]]):
        _, spec, opts = bind(fn, x, x, n, BLOCK=128, **options)
        assert s.specialization == tuple(tuple(e) for e in param_specialization(fn, spec))
        expected.add(in_process_key(spec, opts))
    assert set(cache) == expected


def test_manifest_round_trip_is_atomic(kernels, compile_only_target, tmp_path):
    manifest = _record(kernels.add_one_kernel)
    path = tmp_path / "m.json"
    path.write_text("old")
    write_manifest(manifest, path)
    assert read_manifest(path) == manifest
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".zerojit")) == []
    fresh = tmp_path / "plain"
    fresh.write_text("")
    assert path.stat().st_mode & 0o777 == fresh.stat().st_mode & 0o777  # open()'s mode, not mkstemp's 0600
    data = json.loads(path.read_text())
    assert data["format"] == "zerojit-manifest" and data["version"] == 2
    assert data["kernels"][0]["specializations"][0]["specialization"][2] == ["i32", "D"]


def test_corrupted_manifests_are_refused_naming_the_problem(kernels, compile_only_target, tmp_path):
    path = tmp_path / "m.json"
    write_manifest(_record(kernels.add_one_kernel), path)
    text = path.read_text()
    bad = tmp_path / "bad.json"
    cases = [
        (text[: len(text) // 2], "truncated or corrupted JSON"),
        (json.dumps({"format": "zerojit-bundle"}), "not a zerojit manifest"),
        (text.replace('"version": 2', '"version": 7'), "schema version 7"),
        (text.replace(f'"source_hash": "{kernels.add_one_kernel.cache_key}"', '"source_hash": 5'),
         r"kernels\[0\]: field 'source_hash' must be a str"),
        (text.replace('"launches": 2', '"launches": "two"'), r"specializations\[0\]: field 'launches' must be an int"),
        (text.replace('"launches": 2', '"launches": -3'), r"specializations\[0\]: field 'launches' must be >= 0, not -3"),
        (text.replace('"num_warps": 2', '"num_warps": "four"'),
         r"specializations\[2\]: field 'options': 'num_warps' must be an int, not str"),
        (text.replace('"tunings": []', '"tunings": {}'), r"kernels\[0\]: field 'tunings' must be a list"),
        (text.replace('"tunings": []', '"tunings": [{"key": [[1]], "config": {}}]'),
         r"tunings\[0\]: field 'key' must hold JSON scalars only"),
    ]
    for body, message in cases:
        assert body != text
        bad.write_text(body)
        with pytest.raises(ManifestError, match=message):
            read_manifest(bad)


def test_warmup_from_manifest_reproduces_every_key_and_counts_raw_hits(kernels, compile_only_target, tmp_path):
    fn = kernels.add_one_kernel
    path = tmp_path / "m.json"
    write_manifest(_record(fn, LAUNCHES + [(1, {})]), path)  # n == 1: a key the replay never reaches
    recorded = set(kernel_cache(fn, compile_only_target.device))
    with compile_only("cuda:80") as drv:  # another device cache: the warm-up alone fills it
        registry = JitWarmupRegistry()
        report = registry.warmup(manifest=path, progress=False)
        assert report.ok and report.skipped == () and report.num_keys == 4
        assert set(kernel_cache(fn, drv.device)) == recorded  # exactly the keys the program launched
        [kernel] = registry.kernels
        assert isinstance(kernel, RecordedKernel) and kernel.name == f"{kernels.__name__}.add_one_kernel"
        restore = count_raw_launches(registry.kernels)
        try:
            with JitMonitor("error", report=report) as monitor:
                _launch_all(fn)  # the program, unchanged
                audit = build_audit(report, monitor)
                assert monitor.counts().runtime_compiles == 0 and monitor.counts().launches == 4
                with pytest.raises(RuntimeJitError) as raised:
                    _launch_all(fn, torch.float16, [(64, {})])
        finally:
            restore()
    [coverage] = audit.kernels
    assert [w.hits for w in coverage.warmed] == [2, 1, 1, 0] and len(coverage.dead) == 1 and audit.ok
    message = str(raised.value)
    assert f"kernel '{kernels.__name__}.add_one_kernel' would compile" in message
    assert "x_ptr: warmed as *fp32 16-byte-aligned, called as *fp16 16-byte-aligned" in message
    assert "record the program again" in message
    assert "registration" not in message


def test_a_manifest_warm_up_reports_the_import_of_its_kernels_modules_apart(compile_only_target, tmp_path, monkeypatch):
    """The warm-up imports each recorded function's module (a library's: torch with it, about a
    second): its own phase, and in the report's first line (``zerojit warmup``'s and ``exec``'s),
    apart from compiling and loading. Reference: a module that sleeps 0.3 s when imported."""
    name = f"zj_slow_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("import time\ntime.sleep(0.3)\n" + KERNELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "m.json"
    try:
        write_manifest(_record(importlib.import_module(name).add_one_kernel), path)
        sys.modules.pop(name)  # the warm-up imports it again, as a new process's does
        report = JitWarmupRegistry().warmup(manifest=path, progress=False)
    finally:
        sys.modules.pop(name, None)
    phases = dict(report.stats.phases)
    assert report.ok and report.num_keys == 3
    assert 0.3 <= phases["modules"] < report.seconds and phases["manifest"] < phases["modules"]
    first = report.summary().splitlines()[0]
    assert f"in {report.seconds:.2f} s ({phases['modules']:.2f} s of it importing the recorded kernels' modules; " \
           "target cuda:90), 0 failures" in first, first


@pytest.mark.parametrize("mode", ["fork", "spawn"])
def test_a_manifest_warm_up_with_workers_compiles_each_key_once_and_loads_it(kernels, compile_only_target, tmp_path,
                                                                            monkeypatch, mode):
    """Workers compile each recorded key once; this process compiles nothing and runs no second
    lookup (Triton's listener hears nothing here): it loads their entries into the very keys a
    serial warm-up fills."""
    from triton import knobs

    from zerojit import precompile

    fn = kernels.add_one_kernel
    path = tmp_path / "m.json"
    write_manifest(_record(fn, LAUNCHES + [(1, {})]), path)
    monkeypatch.setenv(precompile.WORKER_START_ENV, mode)
    monkeypatch.setattr(precompile, "_COMPILE_WHILE_BOOTING", False)  # spawned: every key to a worker all the same
    results = {}
    for workers in (1, 2):
        monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / f"cache-{workers}"))
        with compile_only("cuda:80") as drv:
            fn.device_caches.pop(drv.device, None)
            events: list = []
            monkeypatch.setattr(knobs.compilation, "listener", lambda *, cache_hit, **_: events.append(cache_hit))
            report = JitWarmupRegistry().warmup(manifest=path, workers=workers, progress=False, generic=False)
            monkeypatch.setattr(knobs.compilation, "listener", None)
            results[workers] = (report, events, set(kernel_cache(fn, drv.device)))
    (serial, s_events, s_keys), (parallel, p_events, p_keys) = results[1], results[2]
    assert serial.ok and parallel.ok and serial.num_keys == parallel.num_keys == 4
    assert s_events == [False] * 4 and serial.stats.compiled == 4
    s = parallel.stats
    assert (s.worker_compiled, s.compiled, s.disk_loads, s.workers) == (4, 0, 4, 2) and p_events == []
    assert p_keys == s_keys and len(p_keys) == 4  # Triton's in-process keys, as serial filed them
    compiles = [what for what, *_ in s.timeline if what.startswith("compile ")]
    assert len(compiles) == 4 and all(what.endswith(":add_one_kernel") for what in compiles)
    phases = [name for name, _ in s.phases]
    assert phases[:3] == ["manifest", "modules", "restore"] and ("fork" in phases) == (mode == "fork")
    assert dict(s.phases)["manifest"] > 0


def test_the_raw_primer_launch_hits_the_variant_zerojits_launch_compiled(compile_only_target):
    """loading.prime_raw_launch_path (a GPU manifest warm-up's last step) launches the primer as a
    raw kernel[grid](...): it must find the variant the warm-up compiled through zerojit's launch
    path (here a dry launch: Triton's lookup), never compile at warm-up's end."""
    from triton import knobs

    from zerojit._primer import _primer_kernel, primer
    from zerojit.context import allow_compiles

    with allow_compiles():
        variant = primer.compile(type(primer).CompileKey())
    events: list = []
    previous, knobs.compilation.listener = knobs.compilation.listener, lambda *, cache_hit, **_: events.append(cache_hit)
    try:
        found = _primer_kernel[(1,)](torch.empty(1, dtype=torch.int32))
    finally:
        knobs.compilation.listener = previous
    assert events == [] and found is variant.compiled


def test_autotune_and_heuristics_launches_are_recorded_and_warmed(kernels, compile_only_target, tmp_path):
    x, out = torch.zeros(128), torch.zeros(128)

    def program():
        for n in (64, 100):
            kernels.autotuned_kernel[(1,)](x, out, n)
            kernels.heuristic_kernel[(1,)](x, out, n)

    recorder = Recorder().install()
    try:
        program()
    finally:
        recorder.uninstall()
    tuned, heuristic = recorder.manifest(["app.py"]).kernels
    assert (tuned.qualname, heuristic.qualname) == ("autotuned_kernel", "heuristic_kernel")
    config = kernels.autotuned_kernel.configs[0].all_kwargs()  # Triton's own view of the chosen config
    assert [dict(s.autotune_config) for s in tuned.specializations] == [config, config]
    assert [s.specialization[3] for s in tuned.specializations] == [("constexpr", 64)] * 2
    assert {k: v for k, v in tuned.specializations[0].options} == {k: v for k, v in config.items() if k != "BLOCK"}
    assert [s.specialization[3] for s in heuristic.specializations] == [("constexpr", 64), ("constexpr", 128)]
    assert [s.autotune_config for s in heuristic.specializations] == [None, None]
    path = tmp_path / "m.json"
    write_manifest(recorder.manifest(["app.py"]), path)
    assert read_manifest(path).kernels[0].specializations[0].autotune_config == tuned.specializations[0].autotune_config
    with compile_only("cuda:80"):
        registry = JitWarmupRegistry()
        report = registry.warmup(manifest=path, progress=False)
        assert report.ok and report.num_keys == 4
        restore = count_raw_launches(registry.kernels)
        try:
            with JitMonitor("error", report=report) as monitor:
                program()
                assert monitor.counts().runtime_compiles == 0 and monitor.counts().launches == 4
        finally:
            restore()


def test_a_miss_of_an_int_class_names_the_do_not_specialize_bound(kernels, compile_only_target, tmp_path):
    fn = kernels.add_one_kernel
    path = tmp_path / "m.json"
    write_manifest(_record(fn, [(64, {})]), path)
    with compile_only("cuda:80"):
        report = JitWarmupRegistry().warmup(manifest=path, progress=False)
        with JitMonitor("error", report=report), pytest.raises(RuntimeJitError) as raised:
            _launch_all(fn, launches=[(100, {})])
    assert "n: warmed as divisible-by-16, called as not-divisible-by-16" in str(raised.value)
    assert "do_not_specialize=['n']" in str(raised.value)


def test_a_recorded_key_reads_as_tritons_classes():
    key = RecordedKey((("*fp32", "D"), ("*fp16", ""), ("i32", None), ("i64", "D"), ("fp32", None), ("constexpr", 128)),
                      (("num_warps", 4),))
    assert repr(key) == "RecordedKey(*fp32:D, *fp16, i32:nospec, i64:D, fp32, =128; num_warps=4)"


def test_unwarmed_raw_launch_is_not_a_dropped_registration(kernels, compile_only_target):
    with JitMonitor("warn", report=()) as monitor:
        _launch_all(kernels.add_one_kernel, launches=[(64, {})])
        [miss] = monitor.misses()
    assert "not a zerojit kernel" in miss.compile.summary() and "zerojit record" in miss.compile.summary()
    assert "registration" not in miss.compile.summary() and "registration" not in miss.compile.explain()


def _edited(manifest: Manifest, **changes) -> Manifest:
    [k] = manifest.kernels
    fields = {**k.__dict__, **{n: v for n, v in changes.items() if n != "triton_version"}}
    return Manifest(changes.get("triton_version", manifest.triton_version), manifest.target, manifest.command,
                    (KernelRecord(**fields),))


def test_kernels_that_cannot_be_warmed_are_skipped_per_kernel(kernels, compile_only_target, tmp_path):
    good = _record(kernels.add_one_kernel)
    cases = {
        "changed": (_edited(good, source_hash="0" * 64), "its source changed since recording (source hash "),
        "gone": (_edited(good, module="zj_no_such_module"), "module 'zj_no_such_module' does not import"),
        "main": (_edited(good, module="__main__"), "defined in the program's __main__"),
    }
    merged = Manifest(good.triton_version, good.target, good.command,
                      good.kernels + tuple(m.kernels[0] for m, _ in cases.values()))
    path = tmp_path / "m.json"
    write_manifest(merged, path)
    with compile_only("cuda:80"):
        report = JitWarmupRegistry().warmup(manifest=path, progress=False)
    assert report.ok and report.num_keys == 3  # the good kernel is warmed
    assert len(report.skipped) == 3
    for skip, (_, reason) in zip(report.skipped, cases.values()):
        assert skip.kernel == f"{kernels.__name__}.add_one_kernel" or skip.kernel.endswith(".add_one_kernel")
        assert reason in skip.reason
    assert "SKIPPED" in report.summary()


def test_growth_names_each_parameter_and_what_bounding_it_saves(kernels, compile_only_target):
    """The saving of a bound is checked against Triton's binder on a twin kernel that declares it."""
    fn, bounded_fn = kernels.add_one_kernel, kernels.add_one_bounded_kernel
    x = torch.zeros(129)
    calls = [(x, 64, 128), (x[1:], 64, 128), (x, 1, 128), (x, 100, 128), (x, 64, 256)]
    manifest = _record_calls(fn, calls)
    found = {g.parameter: g for g in growth(manifest)}
    assert set(found) == {"x_ptr", "n", "BLOCK"}
    n, ptr = found["n"], found["x_ptr"]
    assert (n.kind, n.values, n.fix) == ("int", ("divisible by 16", "equal to 1", "not divisible by 16"),
                                         "do_not_specialize=['n']")
    assert (ptr.kind, ptr.fix) == ("pointer", "do_not_specialize_on_alignment=['x_ptr']")
    assert (found["BLOCK"].kind, found["BLOCK"].values) == ("constexpr", ("128", "256"))
    assert (n.variants, n.saves, ptr.saves) == (5, 2, 1)
    # Triton's binder on the twin that bounds n and x_ptr's alignment: the variants left.
    out = torch.zeros(128)
    twin = {tuple(map(tuple, bind(bounded_fn, a, out, v, BLOCK=b)[1])) for a, v, b in calls}
    [record] = manifest.kernels
    assert bounded_together(record, [n, ptr]) == len(twin) == 2


def _record_calls(fn, calls) -> Manifest:
    out = torch.zeros(128)
    recorder = Recorder().install()
    try:
        for x, n, block in calls:
            fn[(1,)](x, out, n, BLOCK=block)
    finally:
        recorder.uninstall()
    return recorder.manifest(["app.py"])


# ---------------------------------------------------------------------------------------------
# The command line, on unmodified programs
# ---------------------------------------------------------------------------------------------

LIGER_APP = '''
"""Liger-Kernel's RMSNorm forward, unmodified, on CPU tensors."""
import sys

import torch
from liger_kernel.ops.rms_norm import LigerRMSNormFunction

dtype = getattr(torch, sys.argv[1])
for rows, cols in ((4, 64), (3, 100)):
    LigerRMSNormFunction.apply(torch.randn(rows, cols, dtype=dtype), torch.ones(cols, dtype=dtype), 1e-6)
print("ran")
'''


# record's --target where there is no GPU (it is refused without one there); on a GPU, none: launches run
NO_GPU_TARGET = [] if torch.cuda.is_available() else ["--target", "cuda:90"]




def test_liger_kernel_program_recorded_then_executed_with_zero_runtime_compiles(tmp_path):
    pytest.importorskip("liger_kernel")
    (tmp_path / "app.py").write_text(LIGER_APP)
    rec = _zerojit(["record", "-o", "m.json", "--target", "cuda:90", "--report", "--", "python", "app.py", "float32"],
                   tmp_path / "cache-record", tmp_path)
    assert rec.returncode == 0, rec.stderr
    assert "ran" in rec.stdout and "generalisation:" in rec.stdout
    manifest = read_manifest(tmp_path / "m.json")
    [k] = manifest.kernels
    assert (k.module, k.qualname, len(k.specializations), k.launches) == (
        "liger_kernel.ops.rms_norm", "_rms_norm_forward_kernel", 2, 2)

    fresh = tmp_path / "cache-exec"  # nothing compiled there: the warm-up compiles, the program must not
    run = _zerojit(["exec", "--manifest", "m.json", "--no-progress", "--", "python", "app.py", "float32"], fresh,
                   tmp_path)
    assert run.returncode == 0, run.stderr
    assert "ran" in run.stdout
    assert "warm-up: 2 keys over 1 kernel" in run.stderr  # error mode (compile-only): no generic variants to serve
    assert "2 monitored launches, 0 runtime compiles" in run.stderr
    assert "s of it importing the recorded kernels' modules; target cuda:90)" in run.stderr  # Liger's, torch's

    refused = _zerojit(["exec", "--manifest", "m.json", "--no-progress", "--", "python", "app.py", "bfloat16"],
                       fresh, tmp_path)
    assert refused.returncode == 1
    assert "kernel 'liger_kernel.ops.rms_norm._rms_norm_forward_kernel' would compile" in refused.stderr
    assert "called as *bf16" in refused.stderr and "Traceback" not in refused.stderr
    assert "zerojit exec: zerojit:" not in refused.stderr  # one prefix
    assert "add the dtype to the kernel's key space" not in refused.stderr and "record the program again" in refused.stderr
    # (--no-learned: the bfloat16 key the refused run learned is not warmed, so both launches compile)
    warned = _zerojit(["exec", "--manifest", "m.json", "--no-progress", "--jit-monitor-mode", "warn", "--no-learned",
                       "--", "python", "app.py", "bfloat16"], fresh, tmp_path)
    assert warned.returncode == 1 and "ran" in warned.stdout  # it ran, compiling: a runtime compile is exit 1
    assert "2 monitored launches, 2 runtime compiles" in warned.stderr

    workers = _zerojit(["warmup", "--manifest", "m.json", "--workers", "2", "--no-progress", "--json", "w.json"],
                       tmp_path / "cache-w", tmp_path)  # the target: the manifest's (no GPU here)
    assert workers.returncode == 0, workers.stderr
    assert "2 keys + 2 generic variants over 1 kernel" in workers.stdout and "target cuda:90" in workers.stdout
    assert "2 compiled by 2 worker processes" in workers.stdout
    stats = json.loads((tmp_path / "w.json").read_text())["stats"]
    assert (stats["worker_compiled"], stats["compiled"], stats["disk_loads"]) == (2, 0, 2)  # each key once, loaded here
    assert [p["phase"] for p in stats["phases"]][:4] == ["manifest", "modules", "restore", "fork"]
    # forked from this process, which imported Liger (and torch) for the manifest: no worker imports them again
    assert {t["what"] for t in stats["timeline"] if not t["what"].startswith("compile ")} == {"fork", "set-up"}
    assert stats["recovered"] == []

    bundle = _zerojit(["bundle", "export", "--manifest", "m.json", "-o", "b.tar.gz", "--workers", "1",
                       "--no-progress"], fresh, tmp_path)
    assert bundle.returncode == 0, bundle.stderr
    assert "_rms_norm_forward_kernel" in bundle.stdout


def test_cli_refuses_bad_manifests_and_programs_in_one_line(tmp_path):
    (tmp_path / "bad.json").write_text('{"format": "zerojit-manifest", "vers')
    out = _zerojit(["warmup", "--manifest", "bad.json", "--target", "cuda:90"], tmp_path / "c", tmp_path)
    assert out.returncode == 1 and "truncated or corrupted" in out.stderr and "Traceback" not in out.stderr
    out = _zerojit(["warmup", "--manifest", "missing.json"], tmp_path / "c", tmp_path)
    assert out.returncode == 2 and "does not exist" in out.stderr
    if not torch.cuda.is_available():  # an edited target field: named, not taken for a GPU recording's
        write_manifest(Manifest(TRITON_VERSION, "nosuch", ("python", "x.py"),
                                (KernelRecord("m", "f", "0" * 64, ("x",), (), ()),)), tmp_path / "t.json")
        out = _zerojit(["warmup", "--manifest", "t.json"], tmp_path / "c", tmp_path)
        assert out.returncode == 2 and "t.json: field 'target' is 'nosuch', not a compile-only target" in out.stderr
    (tmp_path / "x.py").write_text("pass\n")
    for command in ("warmup", "exec"):  # a bad flag is named before the file is read
        args = [command, "--manifest", "bad.json", "--target", "nosuch"] + (["--", "python", "x.py"] if command == "exec" else [])
        out = _zerojit(args, tmp_path / "c", tmp_path)
        assert out.returncode == 2 and "compile-only target 'nosuch' is not of the form" in out.stderr, out.stderr
    out = _zerojit(["record", "-o", "m.json", "--", "ls", "-l"], tmp_path / "c", tmp_path)
    assert out.returncode == 2 and "'ls' is not a Python program" in out.stderr
    out = _zerojit(["record", "-o", "m.json", "--", "python", "-m", "zj_no_such_module.sub"], tmp_path / "c", tmp_path)
    assert out.returncode == 2 and "python -m zj_no_such_module.sub: no module named 'zj_no_such_module'" in out.stderr
    assert not (tmp_path / "m.json").exists()  # refused before a child started: no manifest written


def test_runner_recorded_then_executed_matches_its_contract_audit(tmp_path):
    """The manifest of `zerojit run` holds exactly the contract keys its trace hit (its audit's
    non-dead keys), with the same launch counts but the primer's; its dead contract keys are the
    difference."""
    from zerojit.runner.config import load_config
    from zerojit.runner.engine import PRIMER_ROUNDS, primer_batches

    primer = len(primer_batches(load_config("dsv4-like"))) * PRIMER_ROUNDS  # steps

    cache = tmp_path / "cache"
    rec = _zerojit(["record", "-o", "m.json", *NO_GPU_TARGET, "--", "zerojit", "run", "--requests", "4",
                    "--no-progress", "--json", "run.json"], cache, tmp_path)
    assert rec.returncode == 0, rec.stderr
    manifest = read_manifest(tmp_path / "m.json")
    audit = json.loads((tmp_path / "run.json").read_text())["audit"]["detail"]
    contract = {k["kernel"]: k for k in audit["kernels"]}
    assert len(manifest.kernels) == len(contract) == 7
    for k in manifest.kernels:
        name = k.qualname.strip("_").removesuffix("_kernel")  # the contract kernel's default name
        hit = [w for w in contract[name]["warmed"] if w["hits"]]
        assert len(k.specializations) == len(hit), name
        # The recording also sees the runner's primer (engine.primer_steps: its batches, each
        # round, before the trace, left out of the run's own counts): 1-3 launches a step.
        assert PRIMER_ROUNDS <= k.launches - contract[name]["hits"] <= 3 * primer, name
    assert manifest.num_specializations + audit["dead_warmups"] == sum(len(k["warmed"]) for k in contract.values())

    run = _zerojit(["exec", "--manifest", "m.json", "--no-progress", "--", "zerojit", "run", "--requests", "4",
                    "--no-progress"], tmp_path / "cache-exec", tmp_path)
    assert run.returncode == 0, run.stderr
    assert "zero runtime compiles" in run.stdout and "0 runtime compiles" in run.stderr


# ---------------------------------------------------------------------------------------------
# Fresh user, second trial: the program's own errors, Ctrl-C, python -c, __main__ kernels
# ---------------------------------------------------------------------------------------------

C_CODE = ("import sys, __main__\nx = 5\nprint(sys.argv, __name__, __main__.x, hasattr(__main__, '__file__'))\n"
          "sys.exit(3)")


def test_python_c_runs_its_code_as_main_with_its_argv_as_python_does(monkeypatch, capfd):
    from zerojit.recording import Program

    python = subprocess.run([sys.executable, "-c", C_CODE, "a", "b"], capture_output=True, text=True)  # the reference
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    main = sys.modules["__main__"]
    assert Program(["python", "-c", C_CODE, "a", "b"]).run() == python.returncode == 3
    assert capfd.readouterr().out == python.stdout == "['-c', 'a', 'b'] __main__ 5 False\n"
    assert sys.modules["__main__"] is main
    failing = subprocess.run([sys.executable, "-c", "1 / 0"], capture_output=True, text=True)
    assert Program(["python", "-c", "1 / 0"]).run() == failing.returncode == 1
    assert capfd.readouterr().err == failing.stderr  # its frames only, as python prints them


BOOM = '''
def fail():
    raise ValueError("the program's own error")


fail()
'''


def test_a_programs_exception_reads_as_python_prints_it_and_zerojits_summary_follows(tmp_path):
    script = tmp_path / "boom.py"
    script.write_text(BOOM)
    python = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)  # the reference
    assert python.returncode == 1 and python.stderr.startswith("Traceback (most recent call last):\n")
    write_manifest(Manifest(TRITON_VERSION, "cuda:90", ("python", "boom.py"), ()), tmp_path / "m.json")
    run = _zerojit(["exec", "--manifest", "m.json", "--no-progress", "--", "python", str(script)], tmp_path / "c", tmp_path)
    assert run.returncode == 1, run.stderr
    report, traceback = run.stderr.split("Traceback", 1)
    assert "warm-up: 0 keys" in report
    assert "Traceback" + traceback == python.stderr + "zerojit exec: 0 monitored launches, 0 runtime compiles\n"
    rec = _zerojit(["record", "-o", "r.json", *NO_GPU_TARGET, "--", "python", str(script)], tmp_path / "c", tmp_path)
    assert rec.returncode == 1 and rec.stderr == python.stderr + "zerojit record: the program exited with status 1\n"
    assert read_manifest(tmp_path / "r.json").command == ("python", str(script))


def test_ctrl_c_during_record_ends_in_one_line_after_the_manifest_is_written(tmp_path):
    import signal

    (tmp_path / "slow.py").write_text('import time\nprint("started", flush=True)\ntime.sleep(120)\n')
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "c"), "PYTHONPATH": str(SRC)}
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.Popen([sys.executable, "-m", "zerojit", "record", "-o", "m.json", *NO_GPU_TARGET, "--", "python",
                             "slow.py"],
                            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,
                            # as from a terminal: a pytest run started as a background job (bash without job
                            # control, `cmd &`) ignores SIGINT, and its children would inherit that
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout.readline() == "started\n"
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: to the whole process group
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130 and err == "zerojit: interrupted\n", (proc.returncode, err)
    assert read_manifest(tmp_path / "m.json").command == ("python", "slow.py")


def test_ctrl_c_while_records_child_imports_ends_in_one_line(tmp_path):
    """The child that runs the program first imports zerojit (torch, Triton: a second or more); a
    Ctrl-C then reached it too (one process group) and printed its KeyboardInterrupt traceback
    through torch's imports above ``zerojit: interrupted``."""
    import signal
    import time

    (tmp_path / "slow.py").write_text('import time\ntime.sleep(120)\n')
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "c"), "PYTHONPATH": str(SRC)}
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.Popen([sys.executable, "-m", "zerojit", "record", "-o", "m.json", *NO_GPU_TARGET, "--", "python",
                             "slow.py"],
                            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while not _child_running_code(proc.pid):  # the child started its bootstrap: its imports take a second or more
            assert proc.poll() is None and time.monotonic() < deadline, "record started no child"
            time.sleep(0.01)
        time.sleep(0.5)  # past the interpreter's own start (its handler installed), well inside torch's import
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: to the whole process group
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130 and err == "zerojit: interrupted\n", (proc.returncode, err[-3000:])


def _child_running_code(parent: int) -> bool:
    """Whether a child of ``parent`` runs ``python -c`` (record's bootstrap, exec-ed)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) != parent:
                        continue
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if b"\0-c\0" in f.read():
                        return True
            except OSError:
                continue
    return False


def test_sigterm_of_record_alone_takes_its_program_and_private_folder_with_it(tmp_path):
    """``kill PID`` reaches ``zerojit record`` alone, not the child that runs the program. SIGTERM's
    default action killed record at once: the program ran on without it (and would then write
    the manifest, program source included, into a private folder nobody removes), and that folder
    stayed. Now record ends the program, removes the folder, writes no manifest, and ends by SIGTERM."""
    import signal
    import time

    (tmp_path / "slow.py").write_text('import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(120)\n')
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "c"), "PYTHONPATH": str(SRC), "TMPDIR": str(tmp_path / "tmp")}
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.Popen([sys.executable, "-m", "zerojit", "record", "-o", "m.json", *NO_GPU_TARGET, "--", "python",
                             "slow.py"],
                            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    program = None
    try:
        program = int(proc.stdout.readline())
        proc.send_signal(signal.SIGTERM)  # to record alone
        out, err = proc.communicate(timeout=120)
        deadline = time.monotonic() + 30
        while os.path.exists(f"/proc/{program}") and \
                open(f"/proc/{program}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the program outlived zerojit record"
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        if program is not None:
            try:
                os.kill(program, signal.SIGKILL)
            except ProcessLookupError:
                pass
    # its last line (a Triton may warn on stderr before it), no traceback
    assert proc.returncode == -signal.SIGTERM and err.splitlines()[-1:] == ["zerojit: terminated"], (proc.returncode, err)
    assert "Traceback" not in err, err
    assert not (tmp_path / "m.json").exists() and os.listdir(tmp_path / "tmp") == []


def test_a_program_that_launches_nothing_needs_no_target_to_warm(tmp_path):
    from zerojit.compile_only import current_target_name

    assert Recorder().manifest(["python", "-c", "pass"], target="cuda:80").target == "cuda:80"  # what it ran under
    assert Recorder().manifest(["python", "-c", "pass"]).target == "device"  # a GPU's recording of no launch
    if current_target_name() is not None:  # (with no GPU, record needs --target: the manifest is written here)
        rec = _zerojit(["record", "-o", "e.json", "--", "python", "-c", "print('no kernel')"], tmp_path / "c", tmp_path)
        assert rec.returncode == 0 and rec.stdout.startswith("no kernel\n"), rec.stderr
    else:
        write_manifest(Manifest(TRITON_VERSION, "device", ("python", "-c", "print('no kernel')"), ()),
                       tmp_path / "e.json")
    manifest = read_manifest(tmp_path / "e.json")
    assert manifest.kernels == () and manifest.target == (current_target_name() or "device")
    out = _zerojit(["warmup", "--manifest", "e.json", "--no-progress"], tmp_path / "c", tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ("zerojit warmup: note: the manifest holds no kernel (its program launched none): there is "
                          "nothing to warm\n")
    assert out.stdout.startswith("warm-up: 0 keys over 0 kernels")


MAIN_KERNEL = '''
import torch
import triton
import triton.language as tl


def make():
    @triton.jit
    def main_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

    return main_kernel


make()[(1,)](torch.zeros(64), 64, BLOCK=64)
print("ran")
'''


def test_a_kernel_defined_in_a_function_of_main_is_named_when_recorded_and_its_miss_says_why(tmp_path):
    # (a kernel at the top level of __main__ is carried by its source: test_script_kernels)
    (tmp_path / "app.py").write_text(MAIN_KERNEL)
    why = ("defined inside a function of the program's __main__ (the script itself), which does not exist before the "
           "program runs: move the kernel to the script's top level, then record the program again")
    name = "__main__.make.<locals>.main_kernel"
    rec = _zerojit(["record", "-o", "m.json", "--target", "cuda:90", "--", "python", "app.py"], tmp_path / "c", tmp_path)
    assert rec.returncode == 0 and "ran" in rec.stdout, rec.stderr
    assert [line for line in rec.stderr.splitlines() if line.startswith("zerojit record:")] == [
        f"zerojit record: warning: a manifest cannot warm {name} (warmup and exec skip it): {why}"]
    assert "program_source" not in (tmp_path / "m.json").read_text()
    run = _zerojit(["exec", "--manifest", "m.json", "--no-progress", "--", "python", "app.py"], tmp_path / "c", tmp_path)
    assert run.returncode == 1 and "ran" not in run.stdout and "Traceback" not in run.stderr, run.stderr
    assert f"  SKIPPED {name}: {why}\n" in run.stderr
    assert f"the manifest recorded it, but its warm-up skipped it: {why}" in run.stderr
    assert "no manifest warmed it" not in run.stderr


APP_KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)
'''


def test_a_manifest_of_a_kernel_beside_the_program_warms_from_anywhere_and_fails_clearly_once_moved(tmp_path):
    """A kernel module beside the recorded program imports from the program's folder, which the
    manifest holds, wherever warmup runs; once that folder is gone, from the current folder (the
    console script, unlike ``python -m``, has none on sys.path: warmup and bundle export put it
    there). With neither, every kernel is skipped: exit 1, the fix named, no bundle written."""
    script = Path(sys.executable).with_name("zerojit")
    if not script.exists():
        pytest.skip("no zerojit console script beside this interpreter")
    module = f"zj_app_kern_{uuid.uuid4().hex[:8]}"
    app = tmp_path / "app"
    app.mkdir()
    (app / f"{module}.py").write_text(APP_KERNEL)
    (app / "app.py").write_text(f"import torch\nfrom {module} import add_kernel\n"
                                "x = torch.zeros(100)\nadd_kernel[(1,)](x, torch.empty_like(x), 100, BLOCK=128)\n")
    cache = tmp_path / "cache"
    rec = _zerojit(["record", "-o", "m.json", "--target", "cuda:90", "--", "python", "app/app.py"], cache, tmp_path)
    assert rec.returncode == 0, rec.stderr
    assert read_manifest(tmp_path / "m.json").program_folder == str(app)
    env = {**os.environ, "TRITON_CACHE_DIR": str(cache)}
    for k in ("TRITON_INTERPRET", "ZEROJIT_JIT_MONITOR", "PYTHONPATH"):
        env.pop(k, None)

    def console(*args, cwd):
        return subprocess.run([str(script), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600)

    other = tmp_path / "elsewhere"
    other.mkdir()
    anywhere = console("warmup", "--manifest", str(tmp_path / "m.json"), "--target", "cuda:90", cwd=other)
    assert anywhere.returncode == 0 and "1 key" in anywhere.stdout, anywhere.stdout + anywhere.stderr
    moved = tmp_path / "moved"
    app.rename(moved)
    gone = console("warmup", "--manifest", "../m.json", "--target", "cuda:90", cwd=other)
    assert gone.returncode == 1, gone.stdout + gone.stderr
    assert f"SKIPPED {module}.add_kernel: module {module!r} does not import here" in gone.stdout
    assert "put the module's folder on PYTHONPATH (or run from it)" in gone.stdout
    assert "zerojit warmup: nothing warmed: every recorded kernel was skipped" in gone.stderr
    bundle = console("bundle", "export", "--manifest", "../m.json", "-o", "b.tgz", "--target", "cuda:90", cwd=other)
    assert bundle.returncode == 1 and "zerojit bundle export: SKIPPED" in bundle.stderr, bundle.stderr
    assert not (other / "b.tgz").exists()
    here = console("warmup", "--manifest", "../m.json", "--target", "cuda:90", cwd=moved)
    assert here.returncode == 0 and "SKIPPED" not in here.stdout, here.stdout + here.stderr
    assert "1 key" in here.stdout, here.stdout


TUNED_APP_KERNEL = '''
import triton
import triton.language as tl

_TIMES = [3.0, 1.0, 2.0]  # the second config is fastest: the autotuner's choice


def fake_bench(kernel_call, quantiles):
    """A do_bench of the kernel's own (kept under compile-only, unlike the driver's dry one)."""
    kernel_call()
    t = _TIMES.pop(0)
    _TIMES.append(t)
    return [t, t, t]


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2), triton.Config({"BLOCK": 128}, num_warps=4),
                          triton.Config({"BLOCK": 256}, num_warps=4)], key=["n"], do_bench=fake_bench)
@triton.jit
def tuned_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)
'''


def test_autotune_choices_recorded_are_restored_by_exec_so_nothing_benchmarks(tmp_path):
    """The autotuner's choice at each tuning key goes into the manifest; exec puts it back into
    the autotuner before the program runs, so its launch at that key benchmarks nothing (error
    mode would block a benchmark) and runs the recorded config."""
    module = f"zj_tuned_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(TUNED_APP_KERNEL)
    (tmp_path / "app.py").write_text(
        f"import torch\nfrom {module} import tuned_kernel\nx = torch.zeros(100)\n"
        "for _ in range(2):\n    tuned_kernel[lambda meta: (triton.cdiv(100, meta['BLOCK']),)](x, torch.empty_like(x), 100)\n"
        "print('chosen', [c.all_kwargs() for c in tuned_kernel.cache.values()])\n".replace("import torch\n", "import torch, triton\n", 1))
    cache = tmp_path / "cache"
    rec = _zerojit(["record", "-o", "m.json", "--target", "cuda:90", "--", "python", "app.py"], cache, tmp_path)
    assert rec.returncode == 0, rec.stderr
    [kernel] = read_manifest(tmp_path / "m.json").kernels
    [tuning] = kernel.tunings
    assert tuning.key == (100, "torch.float32", "torch.float32")
    assert dict(tuning.config)["BLOCK"] == 128 and dict(tuning.config)["num_warps"] == 4  # the fastest config
    assert len(kernel.specializations) == 3  # every config compiled while it was benchmarked
    ran = _zerojit(["exec", "--manifest", "m.json", "--", "python", "app.py"], cache, tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert "1 autotune choice of the recording restored" in ran.stderr and "0 runtime compiles" in ran.stderr
    assert "'BLOCK': 128, 'num_warps': 4" in ran.stdout, ran.stdout  # the program ran the recorded choice

    (tmp_path / "m.json").write_text((tmp_path / "m.json").read_text().replace('"BLOCK": 128', '"BLOCK": 512'))
    ran = _zerojit(["exec", "--manifest", "m.json", "--", "python", "app.py"], cache, tmp_path)
    assert ran.returncode == 0 and "is none of its configs any more: that key gets the default policy" in ran.stderr, \
        ran.stderr  # (under compile-only: the first config that survives pruning, no benchmark)
    assert "1 tuning key(s) untuned under compile-only: default policy (0 nearest tuned, 1 first surviving config)" \
        in ran.stderr and "autotune benchmark of" not in ran.stderr

    kernel_file = tmp_path / f"{module}.py"
    kernel_file.write_text(kernel_file.read_text() + "    pass  # edited after recording\n")
    ran = _zerojit(["exec", "--manifest", "m.json", "--", "python", "app.py"], cache, tmp_path)
    assert ran.returncode == 1 and "none of its recorded tuning choices was restored: the manifest recorded it, but " \
        "its source changed since recording (source hash" in ran.stderr, ran.stderr


def test_an_autotuner_of_several_configs_records_every_config_under_compile_only(kernels, compile_only_target, tmp_path):
    """No GPU to benchmark on: each config's "benchmark" is a dry launch, so every config the tuner
    could choose on the GPU compiles and is recorded; the choice itself (nothing was measured)
    stays neither in the autotuner's cache nor, with cache_results, in Triton's disk cache."""
    tuner = kernels.tuned_three_ways_kernel
    x, out = torch.zeros(128), torch.zeros(128)
    recorder = Recorder().install()
    try:
        for n in (64, 100, 64):  # two tuning keys, the first one launched twice
            tuner[(1,)](x, out, n)
    finally:
        recorder.uninstall()
    assert torch.equal(out, torch.zeros(128))  # dry launches: nothing executed
    manifest = recorder.manifest(["app.py"])
    [k] = manifest.kernels
    want = [c.all_kwargs() for c in tuner.configs]  # Triton's own view of each config
    recorded = [dict(s.autotune_config) for s in k.specializations]
    assert all(c in recorded for c in want) and all(c in want for c in recorded), recorded
    assert {dict(s.values)["n"] for s in k.specializations} == {16, 17}  # both tuning keys' classes
    assert k.launches == 3  # the program's three launches; the benchmarks' dry launches are not counted
    # BLOCK is the tuner's config space, not growth; n's classes (64: divisible by 16, 100: not) are
    assert [g.parameter for g in growth(manifest)] == ["n"]
    assert "BLOCK set by its triton.autotune configs: the tuner's config space" in growth_report(manifest)
    assert tuner.cache == {}
    written = [f for _, _, files in os.walk(tmp_path / "triton-cache") for f in files if f.endswith(".autotune.json")]
    assert written == []


# ---------------------------------------------------------------------------------------------
# exec runs the program's own code, and manifests say who they are (issue 28, section 4)
# ---------------------------------------------------------------------------------------------

EXEC_APP = '''
import sys

import torch

import {module} as kern

print("kernel module", kern.__file__, flush=True)


def main(n):
    x = torch.zeros(128)
    kern.add_kernel[(1,)](x, torch.empty_like(x), n, BLOCK=128)


main(int(sys.argv[1]))
print("ran")
'''


@pytest.fixture(scope="module")
def recorded_app(tmp_path_factory):
    """An app (app/app.py) whose kernel lives in a module beside it, recorded for cuda:90 with n=100
    (an i32 not divisible by 16): ``(root, module name, cache)``; each test copies what it edits."""
    root = tmp_path_factory.mktemp("exec-app")
    module = f"zj_exec_kern_{uuid.uuid4().hex[:8]}"
    app = root / "app"
    app.mkdir()
    (app / f"{module}.py").write_text(APP_KERNEL)
    (app / "app.py").write_text(EXEC_APP.format(module=module))
    cache = root / "cache"
    rec = _zerojit(["record", "-o", "m.json", "--target", "cuda:90", "--", "python", "app/app.py", "100"], cache, root)
    assert rec.returncode == 0 and "ran" in rec.stdout, rec.stderr
    return root, module, cache


def test_exec_imports_the_programs_own_copy_and_source_checks_its_file(recorded_app, tmp_path):
    """A copy of the recorded app whose kernel module was edited: exec imports the copy's module,
    as `python copy/app.py` would (not the recorded folder's, which the manifest names), so the
    source check compares the copy's file and skips the edited kernel, naming that file."""
    import shutil

    root, module, cache = recorded_app
    copy = tmp_path / "copy"
    shutil.copytree(root / "app", copy)
    kern = copy / f"{module}.py"
    kern.write_text(kern.read_text() + "    pass  # edited in the copy\n")
    run = _zerojit(["exec", "--manifest", str(root / "m.json"), "--no-progress", "--", "python", "copy/app.py", "100"],
                   cache, tmp_path)
    assert f"kernel module {kern}\n" in run.stdout, run.stdout + run.stderr  # python's own choice: the copy's
    assert f"SKIPPED {module}.add_kernel: its source changed since recording (source hash " in run.stderr
    causes = ("its source, its starting line (a line added or removed above it counts), a function it calls or a "
              f"global it reads changed; compared: {kern}): record the program again")
    assert causes in run.stderr
    assert run.returncode == 1 and "ran" not in run.stdout  # its launch compiles: blocked in error mode
    # the blocked compile says why, as the warm-up did (not "no manifest warmed it"), its arguments once
    assert "  the manifest recorded it, but its source changed since recording (source hash " in run.stderr
    assert run.stderr.count(causes) == 3 and "no manifest warmed it" not in run.stderr  # SKIPPED, log line, error
    assert run.stderr.count("runtime specialization") == 1, run.stderr


def _launch_line(root) -> int:
    return next(i for i, line in enumerate((root / "app" / "app.py").read_text().splitlines(), start=1)
                if "add_kernel[" in line)


def test_a_blocked_compile_under_exec_names_the_programs_frame_and_closes_with_the_counts(recorded_app):
    """n=64 (divisible by 16) was never recorded: the error says where the program launched it
    (the frame in app.py, not Triton's or zerojit's) and the closing line follows it."""
    root, module, cache = recorded_app
    run = _zerojit(["exec", "--manifest", "m.json", "--no-progress", "--", "python", "app/app.py", "64"], cache, root)
    assert run.returncode == 1 and "ran" not in run.stdout, run.stderr
    lines = run.stderr.splitlines()
    head = lines.index(f"zerojit exec: kernel '{module}.add_kernel' would compile at run time, after warm-up; the JIT "
                       "monitor is in error mode, so nothing was compiled")
    assert lines[head + 1] == f"  launched at app/app.py:{_launch_line(root)} (in main)"
    assert "n: warmed as not-divisible-by-16, called as divisible-by-16" in run.stderr
    assert lines[-1] == "zerojit exec: 1 monitored launch, 1 runtime compile (1 blocked)"  # the blocked launch counted
    assert "Traceback" not in run.stderr


def test_exec_with_the_monitor_off_says_nothing_was_counted(recorded_app):
    """Off installs no monitor: the runtime compile of n=64 goes unseen, so exec cannot exit 1 for
    it; its closing line says so instead of staying silent (the program's own status: 0)."""
    root, module, cache = recorded_app
    run = _zerojit(["exec", "--manifest", "m.json", "--no-progress", "--jit-monitor-mode", "off", "--", "python",
                    "app/app.py", "64"], cache, root)
    assert run.returncode == 0 and "ran" in run.stdout, run.stderr
    assert run.stderr.splitlines()[-1] == "zerojit exec: monitor off: runtime compiles not counted"


def test_a_manifest_of_another_triton_version_is_refused_whole(recorded_app, tmp_path):
    """Triton's source hash does not include its version, so every kernel of a manifest recorded
    with another Triton would pass the source check: the manifest is refused, naming the field
    and both versions (exit 1), by the API and by exec."""
    root, module, cache = recorded_app
    data = json.loads((root / "m.json").read_text())
    assert data["triton_version"] == TRITON_VERSION
    other = tmp_path / "m-9.json"
    other.write_text(json.dumps({**data, "triton_version": "9.9.9"}))
    expected = f"field 'triton_version' is '9.9.9', but this is Triton {TRITON_VERSION!r}"
    sys.path.insert(0, str(root / "app"))
    try:
        with compile_only("cuda:90"), pytest.raises(ManifestError, match=f"{other}: {expected}"):
            JitWarmupRegistry().warmup(manifest=other, progress=False)
    finally:
        sys.path.remove(str(root / "app"))
        sys.modules.pop(module, None)
    run = _zerojit(["exec", "--manifest", str(other), "--no-progress", "--", "python", "app/app.py", "100"], cache,
                   root)
    assert run.returncode == 1 and "ran" not in run.stdout, run.stderr
    assert run.stderr == f"zerojit exec: {other}: {expected}: a manifest warms only with the Triton it was recorded " \
        "with; record the program again with this Triton\n"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: record needs no --target")
def test_record_without_a_gpu_or_target_is_refused_before_the_program_runs(recorded_app, tmp_path):
    """Without a GPU or --target the program's first launch fails ("0 active drivers", an empty
    manifest): record refuses before it starts, asking by Triton's own driver test (creating no
    driver, so no CUDA context in the process that only waits for the program)."""
    root, module, cache = recorded_app
    rec = _zerojit(["record", "-o", str(tmp_path / "m.json"), "--", "python", "app/app.py", "100"], cache, root)
    assert rec.returncode == 2 and "kernel module" not in rec.stdout, rec.stderr  # the program never started
    assert rec.stderr == ("zerojit record: no GPU is visible here: pass the compile-only target to record for (e.g. "
                          "--target cuda:90): every launch is then a dry launch, which needs no GPU\n")
    assert not (tmp_path / "m.json").exists()
    from zerojit.triton_compat import gpu_driver_available

    assert gpu_driver_available() is torch.cuda.is_available() is False  # Triton's driver test, as torch's


def test_a_python_path_that_is_not_this_interpreter_is_refused(recorded_app, tmp_path):
    """`record -- /usr/bin/python3 app.py` would run this zerojit's interpreter, whatever the
    path: a bare name means this interpreter, a path only this interpreter's own (symlinks not
    resolved: a venv's python links to the system one, which lacks the venv's packages)."""
    from typer.testing import CliRunner

    from zerojit.cli import app

    root, module, cache = recorded_app
    other = tmp_path / "python3"
    other.symlink_to(sys.executable)  # the same program, but not this interpreter's path
    script = str(root / "app" / "app.py")
    rec = _zerojit(["record", "-o", str(tmp_path / "m.json"), "--target", "cuda:90", "--", str(other), "app/app.py",
                    "100"], cache, root)
    assert rec.returncode == 2 and "kernel module" not in rec.stdout, rec.stdout + rec.stderr
    here = os.path.dirname(os.path.abspath(sys.executable))
    assert rec.stderr.startswith(f"zerojit record: '{other}' is not this interpreter's path, nor another name of it in "
                                 f"its folder {here}: zerojit runs the program in a child Python process, under its "
                                 f"own Python {sys.executable} ")
    assert not (tmp_path / "m.json").exists()
    audited = CliRunner().invoke(app, ["audit", "--", str(other), script])
    assert audited.exit_code == 2 and f"'{other}' is not this interpreter's path" in audited.output, audited.output

    from zerojit.recording import Program, ProgramError, names_this_python

    saved = list(sys.path)
    try:
        assert Program([sys.executable, script]).script == script
        real = os.path.realpath(sys.executable)
        candidates = [(str(other), "is not this interpreter's path"), ("python2", "is another Python than this one")]
        if os.path.dirname(real) != here:  # the file a venv's python links to: another environment
            candidates.append((real, "is not this interpreter's path"))
        for word, why in candidates:  # exec takes its program through Program too
            with pytest.raises(ProgramError, match=f"^{re.escape(repr(word))} {why}.*: zerojit runs the program in "
                                                   f"this process, under its own Python {re.escape(sys.executable)} "):
                Program([word, script])
    finally:
        sys.path[:] = saved
    for word in ("python", "python3", "python%d.%d" % sys.version_info[:2], sys.executable):
        assert names_this_python(word, where="this process")
    assert not names_this_python("zerojit", where="this process") and not names_this_python("app.py", where="x")


def test_another_name_of_this_interpreter_in_its_folder_is_this_interpreter(tmp_path, monkeypatch):
    """A virtual environment's ``bin/`` holds ``python``, ``python3`` and ``python3.N``, links to
    one file; whichever started zerojit (``sys.executable``: a console script's first line names
    ``python3``), the others name it too. A link to the same file from another folder (another
    environment), or another file in the folder, is refused, naming ``sys.executable``."""
    from zerojit.recording import ProgramError, names_this_python

    real = os.path.realpath(sys.executable)
    env, other = tmp_path / "venv" / "bin", tmp_path / "elsewhere"
    env.mkdir(parents=True)
    other.mkdir()
    (env / "python3").symlink_to(real)
    version = "python%d.%d" % sys.version_info[:2]
    for name in ("python", version):
        (env / name).symlink_to("python3")
    (env / "python2").symlink_to("/bin/sh")  # another program in the same folder
    (other / "python3").symlink_to(real)  # the same program from another folder
    monkeypatch.setattr(sys, "executable", str(env / "python3"))
    monkeypatch.chdir(env)
    for word in (str(env / "python"), str(env / version), str(env / "python3"), "./python", "python", "python3"):
        assert names_this_python(word, where="this process") is True, word
    for word, why in ((str(other / "python3"), f"is not this interpreter's path, nor another name of it in its folder "
                                               f"{env}"),
                      (str(env / "python2"), "is not this interpreter's path"),
                      (str(env / "python3.0"), "is not this interpreter's path"),  # none there
                      ("python2", f"is another Python than this one ({version[6:]})")):
        with pytest.raises(ProgramError) as refused:
            names_this_python(word, where="a child Python process")
        assert str(refused.value).startswith(f"{word!r} {why}"), refused.value
        assert f": zerojit runs the program in a child Python process, under its own Python {env / 'python3'} " \
            in str(refused.value)


def test_record_takes_the_venvs_python_when_zerojit_runs_under_its_python3(recorded_app, tmp_path):
    """The tester's case: `zerojit record -- .venv/bin/python app.py` where zerojit runs under
    .venv/bin/python3 (another name of one interpreter, in its folder) records; it was refused
    as "not this interpreter"."""
    here = os.path.dirname(os.path.abspath(sys.executable))
    siblings = [os.path.join(here, n) for n in ("python", "python3", "python%d.%d" % sys.version_info[:2])
                if os.path.join(here, n) != os.path.abspath(sys.executable)
                and os.path.realpath(os.path.join(here, n)) == os.path.realpath(sys.executable)]
    if not siblings:
        pytest.skip(f"no other name of this interpreter in {here}")
    root, module, cache = recorded_app
    out = tmp_path / "m.json"
    rec = _zerojit(["record", "-o", str(out), "--target", "cuda:90", "--", siblings[0], "app/app.py", "100"], cache,
                   root)
    assert rec.returncode == 0 and "ran" in rec.stdout, rec.stdout + rec.stderr
    [kernel] = read_manifest(out).kernels
    assert kernel.module == module and kernel.launches == 1


def test_the_nearest_key_of_an_int_of_another_width_is_the_key_of_its_class(kernels, compile_only_target, tmp_path):
    """An i64 n divisible by 16 differs from the i32 divisible-by-16 key only in width, and from
    the equal-to-one key (warmed first) in class: the width-only key is the nearer."""
    fn = kernels.add_one_kernel
    path = tmp_path / "m.json"
    write_manifest(_record(fn, [(1, {}), (64, {})]), path)
    report = JitWarmupRegistry().warmup(manifest=path, progress=False)
    assert [str(k) for k in report.keys_by_kernel()[f"{kernels.__name__}.add_one_kernel"]] == [
        "RecordedKey(*fp32:D, *fp32:D, =1, =128)", "RecordedKey(*fp32:D, *fp32:D, i32:D, =128)"]
    with JitMonitor("error", report=report), pytest.raises(RuntimeJitError) as raised:
        _launch_all(fn, launches=[(2**32 + 16, {})])  # Triton's binder: i64, divisible by 16
    miss = raised.value.compile
    assert miss.nearest_key == "RecordedKey(*fp32:D, *fp32:D, i32:D, =128)" and miss.nearest_index == 2
    assert [str(d) for d in miss.differences] == ["n: warmed as i32 divisible-by-16, called as i64 divisible-by-16"]


def test_a_library_warm_up_draws_no_progress_bar_into_output_that_is_no_terminal(kernels, compile_only_target,
                                                                                    tmp_path, capfd):
    """registry.warmup()'s default progress=True draws its bar only where stderr is a terminal (as
    tqdm's disable=None): a log would fill with its redraws."""
    path = tmp_path / "m.json"
    write_manifest(_record(kernels.add_one_kernel), path)
    capfd.readouterr()
    report = JitWarmupRegistry().warmup(manifest=path)  # keys to compile: a bar would be drawn
    assert report.num_keys == 3 and report.stats.restored == 0  # each key went through the warm-up session
    err = capfd.readouterr().err
    assert "zerojit warm-up" not in err and "\r" not in err, err


def test_record_for_a_target_under_the_interpreter_is_refused_before_the_program_runs(tmp_path, monkeypatch):
    """The interpreter compiles nothing, so a compile-only target cannot record there: exit 2 in
    one line, the program not run, no manifest (as exec and warmup --manifest refuse it)."""
    from zerojit import recording
    from zerojit.compile_only import InterpreterProcessError

    (tmp_path / "app.py").write_text("print('ran')\n")
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "c"), "PYTHONPATH": str(SRC), "TRITON_INTERPRET": "1"}
    rec = subprocess.run([sys.executable, "-m", "zerojit", "record", "-o", "m.json", "--target", "cuda:90", "--",
                          "python", "app.py"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert (rec.returncode, rec.stdout) == (2, "")
    assert rec.stderr == ("zerojit record: compile_only() needs a process without TRITON_INTERPRET=1 (the interpreter "
                          "compiles nothing): unset TRITON_INTERPRET\n")
    assert not (tmp_path / "m.json").exists()
    # the child's own check (record_child), before its recorder and the program: no manifest either
    monkeypatch.setattr(recording._tc, "interpreting", lambda: True)
    with pytest.raises(InterpreterProcessError):
        recording.record_child(str(tmp_path / "child.json"), "cuda:90", ["python", "app.py"])
    assert not (tmp_path / "child.json").exists()
