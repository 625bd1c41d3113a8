"""The runtime JIT monitor, on CPU: compile-only warm-up, dry launches, Triton's real hooks.

Three kernels carry the three bugs the monitor must catch and explain:

* ``PagedScale``: warm-up passes the literal 1 for ``block_size``; the run passes 64.
* ``LastBlock``: the block-table width is a constexpr bound; every new width recompiles.
* ``orphan`` (a ``StoreN``): its registration was dropped; it is launched at run time without a
  warm-up.

The kernels are shared with other test files (``tests/_kernels.py``).
"""

from __future__ import annotations

import logging
import os
import threading

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

import torch
import triton
import triton.language as tl
from triton import knobs

from _kernels import LastBlock, PagedScale, StoreN
from zerojit import JitWarmupRegistry, monitor
from zerojit.monitor import JitMonitor, RuntimeJitError, allow_compiles
from zerojit.specialization import SpecClass, bind

paged_scale, last_block, orphan = PagedScale(), LastBlock(), StoreN()
JIT_FNS = (PagedScale.kernel, LastBlock.kernel, StoreN.kernel)


def build_model(registry: JitWarmupRegistry, *, max_blocks: int = 16) -> None:
    """Where the model is built: registers paged_scale and last_block; orphan's call was dropped."""
    with registry.activate():
        paged_scale.register_warmup(block=64)
        last_block.register_warmup(max_blocks=max_blocks)
        # orphan.register_warmup()   <- dropped in a refactor


def warm(mode: str | None = None, **model) -> tuple[JitWarmupRegistry, object]:
    if mode is not None:
        monitor.configure(mode)
    registry = JitWarmupRegistry()
    build_model(registry, **model)
    return registry, registry.warmup(progress=False, target="cuda:90")


def x64():
    return torch.zeros(64), torch.zeros(64)


@pytest.fixture
def dry(compile_only_target):
    """Compile-only target, empty in-process caches, and no monitor left behind."""
    for fn in JIT_FNS:
        fn.device_caches.clear()
    yield compile_only_target
    monitor.shutdown()
    for m in monitor.installed_monitors():
        m.uninstall()
    for fn in JIT_FNS:
        fn.device_caches.clear()


def cached(fn) -> int:
    return sum(len(c[0]) for c in fn.device_caches.values())


# --- bug 1: warmed with the literal 1 -------------------------------------------------------------


def test_literal_one_is_blocked_before_compiling_and_explained(dry):
    compiles = []
    knobs.compilation.listener = lambda **kw: compiles.append(kw["cache_hit"])
    try:
        _, report = warm("error")
        assert monitor.current().mode == "error" and monitor.current().installed
        n_cached, n_compiles = cached(PagedScale.kernel), len(compiles)

        with pytest.raises(RuntimeJitError) as err:
            paged_scale(*(), x=torch.zeros(64), out=torch.zeros(64), block_size=64)
        msg = str(err.value)
        assert "kernel 'paged_scale' would compile at run time" in msg
        assert "nothing was compiled" in msg
        assert "block_size: warmed as equal-to-one, called as divisible-by-16" in msg
        assert "scalar_rep(64) == 16" in msg  # the fix is named
        assert "nearest warmed key: PagedScale.CompileKey(block=64)" in msg
        for arg in ("x_ptr: *fp32 16-byte-aligned", "out_ptr: *fp32 16-byte-aligned", "n: i32 unspecialized",
                    "block_size: i32 divisible-by-16", "BLOCK: constexpr 64"):
            assert arg in msg
        assert "differs in 1 argument" in msg
        rec = err.value.compile
        assert [str(d) for d in rec.differences] == ["block_size: warmed as equal-to-one, called as divisible-by-16"]
        # blocked before compiling: nothing compiled, nothing cached
        assert len(compiles) == n_compiles and cached(PagedScale.kernel) == n_cached
        c = monitor.current().counts()
        assert (c.runtime_compiles, c.blocked, c.compiled, c.disk_loads) == (1, 1, 0, 0)
    finally:
        knobs.compilation.listener = None


def test_error_mode_leaves_triton_and_the_process_usable(dry):
    _, report = warm("error")
    mon = monitor.current()
    for _ in range(2):
        with pytest.raises(RuntimeJitError):
            paged_scale(x=torch.zeros(64), out=torch.zeros(64), block_size=64)
    # the warmed path still launches (a hit, counted on zerojit's launch path)
    x, out = x64()
    assert paged_scale(x=x, out=out, block_size=1) is out
    assert mon.counts().launches == 1 and mon.counts().blocked == 2
    # an allowed path may compile; afterwards it is cached and launches without a hook call
    with allow_compiles():
        paged_scale(x=x, out=out, block_size=64)
    paged_scale(x=x, out=out, block_size=64)
    c = mon.counts()
    assert (c.runtime_compiles, c.blocked, c.compiled, c.launches) == (2, 2, 0, 3)
    assert len(mon.misses()) == 1  # one distinct runtime compile


# --- bug 2: a bound left as constexpr --------------------------------------------------------------


def test_constexpr_bound_recompiles_per_width_warn_then_error(dry, caplog):
    caplog.set_level(logging.WARNING, logger="zerojit.monitor")
    warm("warn", max_blocks=16)
    mon = monitor.current()
    out = torch.zeros(4, dtype=torch.int32)
    for width in (24, 32, 24, 16, 32, 24):
        last_block(block_table=torch.zeros(4, width, dtype=torch.int32), out=out)
    lines = [r.getMessage() for r in caplog.records if r.name == "zerojit.monitor"]
    assert len(lines) == 2, lines  # one line per distinct (kernel, specialization)
    assert all("runtime JIT compile of kernel 'last_block'" in line for line in lines)
    assert "MAX_BLOCKS: warmed as constexpr 16, called as constexpr 24" in lines[0]
    assert "MAX_BLOCKS: warmed as constexpr 16, called as constexpr 32" in lines[1]
    c = mon.counts()
    assert (c.runtime_compiles, c.distinct, c.compiled, c.disk_loads, c.blocked, c.launches) == (2, 2, 2, 0, 0, 6)

    mon.mode = "error"
    with pytest.raises(RuntimeJitError) as err:
        last_block(block_table=torch.zeros(4, 40, dtype=torch.int32), out=out)
    msg = str(err.value)
    assert "kernel 'last_block'" in msg and "MAX_BLOCKS: warmed as constexpr 16, called as constexpr 40" in msg
    assert "make a request-dependent bound a do_not_specialize int" in msg
    assert "num_seqs: i32 unspecialized" in msg


# --- bug 3: a dropped registration ---------------------------------------------------------------


def test_dropped_registration_is_named(dry):
    warm("error")
    with pytest.raises(RuntimeJitError) as err:
        orphan(x=torch.zeros(4, dtype=torch.int32), n=16)
    msg = str(err.value)
    assert "kernel 'store_n' would compile at run time" in msg
    assert "no key of 'store_n' was warmed: its registration was never reached" in msg
    assert "register_warmup" in msg and "x_ptr: *i32 16-byte-aligned" in msg and "n: i32 divisible-by-16" in msg
    assert err.value.compile.nearest_key is None and err.value.compile.warmed_count == 0


# --- compiled vs loaded from Triton's disk cache -----------------------------------------------------


def test_disk_cache_load_is_a_runtime_compile_counted_apart(dry, caplog):
    caplog.set_level(logging.WARNING, logger="zerojit.monitor")
    warm("warn")
    mon = monitor.current()
    x, out = x64()
    paged_scale(x=x, out=out, block_size=64)  # compiled at run time
    PagedScale.kernel.device_caches.clear()  # drop the in-process cache; the disk cache is warm
    paged_scale(x=x, out=out, block_size=64)  # an in-process miss, loaded from disk
    c = mon.counts()
    assert (c.runtime_compiles, c.compiled, c.disk_loads, c.distinct) == (2, 1, 1, 1)
    (m,) = mon.misses()
    assert (m.misses, m.compiled, m.disk_loads, m.blocked) == (2, 1, 1, 0)
    assert len([r for r in caplog.records if r.name == "zerojit.monitor"]) == 1


# --- a second warm-up is not a runtime compile ---------------------------------------------------------


def test_later_warmup_is_not_counted_and_its_keys_join(dry):
    warm("error", max_blocks=16)
    mon = monitor.current()
    late = JitWarmupRegistry()
    with late.activate():
        orphan.register_warmup()
        last_block.register_warmup(max_blocks=24)
    late.warmup(progress=False, workers=2)  # compiles in worker threads: still warm-up
    assert mon.counts().runtime_compiles == 0 and monitor.current() is mon
    orphan(x=torch.zeros(4, dtype=torch.int32), n=16)
    last_block(block_table=torch.zeros(4, 24, dtype=torch.int32), out=torch.zeros(4, dtype=torch.int32))
    assert mon.counts().runtime_compiles == 0 and mon.counts().launches == 2
    assert [v.kernel for v in mon.warmed_variants] == ["paged_scale", "last_block", "store_n", "last_block"]


# --- direct triton.compile --------------------------------------------------------------------------


def _direct_source():
    from triton.compiler import ASTSource

    return ASTSource(StoreN.kernel, {"x_ptr": "*i32", "n": "i32"}, {}, {(0,): [["tt.divisibility", 16]], (1,): []})


def test_direct_triton_compile_is_seen(dry):
    from zerojit.compile_only import parse_target

    warm("warn")
    mon = monitor.current()
    triton.compile(_direct_source(), target=parse_target("cuda:90"))
    c = mon.counts()
    assert (c.runtime_compiles, c.direct_compiles, c.direct_disk_loads) == (0, 1, 0)
    (d,) = mon.direct_compiles()
    assert d.compile.direct and d.compile.kernel == "store_n"
    assert "n: i32 not-divisible-by-16" in d.compile.arguments
    mon.mode = "error"  # Triton reports a direct compile only after it: error mode raises then
    with pytest.raises(RuntimeJitError, match="direct triton.compile of 'store_n'"):
        triton.compile(_direct_source(), target=parse_target("cuda:90"))
    assert mon.counts().direct_disk_loads == 1


# --- chaining with the user's hooks -------------------------------------------------------------------


def test_chains_onto_user_hooks_and_restores_them(dry):
    seen_hook, seen_listener = [], []

    def user_hook(**kw):
        seen_hook.append(kw["fn"].jit_function)
        return None

    def user_listener(**kw):
        seen_listener.append(kw["cache_hit"])

    knobs.runtime.jit_cache_hook, knobs.compilation.listener = user_hook, user_listener
    try:
        warm()  # no monitor configured: warm-up installs nothing
        assert monitor.current() is None and knobs.runtime.jit_cache_hook is user_hook
        warmed = len(seen_listener)
        assert warmed == 2 and len(seen_hook) == 2  # the user's hooks saw the warm-up

        mon = JitMonitor("error").install()
        assert knobs.runtime.jit_cache_hook is not user_hook
        with pytest.raises(RuntimeJitError):
            orphan(x=torch.zeros(4, dtype=torch.int32), n=16)
        assert seen_hook[-1] is StoreN.kernel and len(seen_listener) == warmed  # user hook ran, nothing compiled
        with allow_compiles():  # the user's listener still hears compiles the monitor ignores
            orphan(x=torch.zeros(4, dtype=torch.int32), n=16)
        assert len(seen_listener) == warmed + 1 and mon.counts().runtime_compiles == 1

        # someone chains on top of the monitor; uninstalling leaves their hook and passes through
        top_calls = []
        below = knobs.runtime.jit_cache_hook

        def top(**kw):
            top_calls.append(1)
            return below(**kw)

        knobs.runtime.jit_cache_hook = top
        mon.uninstall()
        assert knobs.runtime.jit_cache_hook is top and knobs.compilation.listener is user_listener
        orphan(x=torch.zeros(4, dtype=torch.int32), n=17)  # a new class: compiles, nobody raises
        assert top_calls and seen_hook[-1] is StoreN.kernel and mon.counts().runtime_compiles == 1
        knobs.runtime.jit_cache_hook = user_hook

        # two monitors uninstalled out of order: each unlinks itself, the user's hook comes back
        a, b = JitMonitor("warn").install(), JitMonitor("warn").install()
        a.uninstall()
        orphan(x=torch.zeros(4, dtype=torch.int32), n=1)  # yet another class
        assert b.counts().runtime_compiles == 1 and a.counts().runtime_compiles == 0
        b.uninstall()
        assert knobs.runtime.jit_cache_hook is user_hook and knobs.compilation.listener is user_listener
        from zerojit import kernel

        assert kernel._launch_observer is None
    finally:
        knobs.runtime.jit_cache_hook, knobs.compilation.listener = None, None


def test_user_hook_that_takes_over_the_compile_is_respected(dry):
    warm()
    knobs.runtime.jit_cache_hook = lambda **kw: True  # "I'll handle it": Triton skips the compile
    try:
        with JitMonitor("error") as mon:
            assert orphan(x=torch.zeros(4, dtype=torch.int32), n=16) is not None
            assert mon.counts().runtime_compiles == 0
    finally:
        knobs.runtime.jit_cache_hook = None


# --- the hook's specialization equals Triton's binder's ----------------------------------------------


@triton.jit(do_not_specialize=["n"], do_not_specialize_on_alignment=["m"])
def _every_class_kernel(x_ptr, y_ptr, n, m, k, flag, f, w: tl.int64, opt, B: tl.constexpr):
    tl.store(y_ptr, tl.load(x_ptr) + n + m + k + w + B)


@pytest.mark.parametrize("args", [
    (torch.zeros(8), torch.zeros(8), 1, 1, 1, True, 0.5, 1, None, 4),
    (torch.zeros(8)[1:], torch.zeros(8, dtype=torch.float16), 64, 32, 17, False, 2.0, 17, None, 8),
    (torch.zeros(8), torch.zeros(8)[3:], 2**40, 2**33, 2**63 + 16, True, 1.0, 2**40, None, 1),
])
def test_hook_specialization_matches_triton_binder(dry, args):
    captured = {}

    def capture(**kw):  # returns True: Triton compiles nothing
        captured.update(kw)
        return True

    knobs.runtime.jit_cache_hook = capture
    try:
        _every_class_kernel.run(*args, grid=(1,), warmup=True)
    finally:
        knobs.runtime.jit_cache_hook = None
    info = captured["compile"]
    spec = monitor.specialization_from_compile_info(_every_class_kernel, info["signature"], info["constants"], info["configs"][0])
    _, expected, _ = bind(_every_class_kernel, *args)
    assert spec == tuple(SpecClass.from_triton(e) for e in expected)


# --- threads ------------------------------------------------------------------------------------------


def test_counts_are_exact_across_threads(dry, caplog):
    caplog.set_level(logging.ERROR, logger="zerojit.monitor")
    warm("error")
    mon = monitor.current()
    errors, barrier = [], threading.Barrier(8)

    def worker():
        x, out = x64()
        barrier.wait()
        for i in range(100):
            paged_scale(x=x, out=out, block_size=1)
            if i % 10 == 0:
                try:
                    paged_scale(x=x, out=out, block_size=64)
                except RuntimeJitError as e:
                    errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    c = mon.counts()
    assert (c.launches, c.blocked, c.runtime_compiles, c.distinct) == (800, 80, 80, 1)
    assert len(errors) == 80
    assert len([r for r in caplog.records if r.name == "zerojit.monitor"]) == 1  # logged once


# --- configuration --------------------------------------------------------------------------------------


def test_environment_variable_and_modes(dry, monkeypatch):
    monkeypatch.setenv(monitor.ENV_VAR, "error")
    warm()
    assert monitor.current().mode == "error"
    monitor.shutdown()
    monkeypatch.setenv(monitor.ENV_VAR, "off")
    warm()
    assert monitor.current() is None
    monkeypatch.setenv(monitor.ENV_VAR, "loud")
    with pytest.raises(ValueError, match="ZEROJIT_JIT_MONITOR must be one of off, warn, error"):
        monitor.configured_mode()
    with pytest.raises(ValueError):
        JitMonitor("loud")
    off = JitMonitor("off").install()
    assert not off.installed and knobs.runtime.jit_cache_hook is None


# --- the words --------------------------------------------------------------------------------------


@pytest.mark.parametrize("warmed, called, text", [
    (SpecClass("constexpr", 1), SpecClass("i32", "D"), "block_size: warmed as equal-to-one, called as divisible-by-16"),
    (SpecClass("constexpr", 1), SpecClass("i64", "D"), "block_size: warmed as equal-to-one, called as i64 divisible-by-16"),
    (SpecClass("i32", "D"), SpecClass("i32", ""), "block_size: warmed as divisible-by-16, called as not-divisible-by-16"),
    (SpecClass("i32", "D"), SpecClass("i64", "D"), "block_size: warmed as i32 divisible-by-16, called as i64 divisible-by-16"),
    (SpecClass("constexpr", 16), SpecClass("constexpr", 24), "block_size: warmed as constexpr 16, called as constexpr 24"),
    (SpecClass("*fp32", "D"), SpecClass("*fp32", ""), "block_size: warmed as *fp32 16-byte-aligned, called as *fp32 unaligned"),
    (SpecClass("constexpr", None), SpecClass("*bf16", "D"), "block_size: warmed as None, called as *bf16 16-byte-aligned"),
])
def test_difference_words(warmed, called, text):
    diff = monitor.ArgDifference("block_size", warmed, called)
    assert str(diff) == text and diff.hint


def test_a_float_parameter_passed_an_int_names_the_int_and_the_fix():
    # Liger's swiglu: gate_multiplier warmed as 1.0 (fp32), served as gate_multiplier=2 (an i32)
    diff = monitor.ArgDifference("gate_multiplier", SpecClass("fp32"), SpecClass("i32", ""))
    assert str(diff) == "gate_multiplier: warmed as fp32, called as i32 not-divisible-by-16"
    assert "float(gate_multiplier)" in diff.hint and "type(gate_multiplier) is float" in diff.hint
    one = monitor.ArgDifference("scale", SpecClass("fp32"), SpecClass("constexpr", 1))
    assert str(one) == "scale: warmed as fp32, called as equal-to-one" and "float(scale)" in one.hint
    back = monitor.ArgDifference("scale", SpecClass("i32", "D"), SpecClass("fp32"))
    assert str(back) == "scale: warmed as i32 divisible-by-16, called as fp32" and "warm with a float" in back.hint


def test_nearest_key_ties_go_to_the_earlier_warmup(dry):
    monitor.configure("error")
    registry = JitWarmupRegistry()
    with registry.activate():
        last_block.register_warmup(max_blocks=32)
        last_block.register_warmup(max_blocks=16)
    registry.warmup(progress=False)
    with pytest.raises(RuntimeJitError) as err:
        last_block(block_table=torch.zeros(4, 24, dtype=torch.int32), out=torch.zeros(4, dtype=torch.int32))
    assert "nearest warmed key: LastBlock.CompileKey(max_blocks=32) (warm-up #1 of 2 for this kernel)" in str(err.value)


def test_cli_jit_monitor_mode_option(monkeypatch):
    import typer
    from typer.testing import CliRunner

    from zerojit.cli import apply_jit_monitor_mode, jit_monitor_mode_option

    seen = []
    app = typer.Typer()

    @app.command()
    def serve(jit_monitor_mode: str = jit_monitor_mode_option("off")) -> None:
        apply_jit_monitor_mode(jit_monitor_mode)
        seen.append(monitor.configured_mode())

    try:
        runner = CliRunner()
        assert runner.invoke(app, ["--jit-monitor-mode", "error"]).exit_code == 0 and seen[-1] == "error"
        monkeypatch.setenv(monitor.ENV_VAR, "warn")
        assert runner.invoke(app, []).exit_code == 0 and seen[-1] == "warn"
        bad = runner.invoke(app, ["--jit-monitor-mode", "loud"])
        assert bad.exit_code == 2 and "must be one of off, warn, error" in bad.output
    finally:
        monitor.shutdown()


# --- a monitor built after warm-up, without report= ---------------------------------------------------


def test_a_monitor_built_without_a_report_knows_this_process_warm_ups(dry):
    from zerojit import JitMonitor as exported, RuntimeJitError as exported_error
    from zerojit.registry import warmup_reports

    assert (exported, exported_error) == (JitMonitor, RuntimeJitError)
    _, report = warm()  # the process monitor stays off: the user installs their own
    assert monitor.current() is None and warmup_reports()[-1] is report
    with JitMonitor("error") as mon:
        assert any(r is report for r in mon.reports)
        with pytest.raises(RuntimeJitError) as err:
            paged_scale(x=torch.zeros(64), out=torch.zeros(64), block_size=64)
    msg = str(err.value)
    assert "nearest warmed key: PagedScale.CompileKey(block=64)" in msg
    assert "block_size: warmed as equal-to-one, called as divisible-by-16" in msg
    assert "registration was never reached" not in msg
    assert JitMonitor("error", report=()).reports == ()


def test_warm_up_listeners_hear_every_warm_up_once_each(dry):
    from zerojit import registry as registry_module

    heard = []
    listener = heard.append
    registry_module.add_warmup_listener(listener)
    registry_module.add_warmup_listener(listener)  # added twice, called once
    try:
        _, first = warm()
        _, second = warm()
    finally:
        registry_module._LISTENERS.remove(listener)
    assert [r is first for r in heard] == [True, False] and heard[1] is second
