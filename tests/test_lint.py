"""Key-space lint (issue 20, DESIGN.md point 13): class-creation checks, warm-up self-checks,
growth at run time, a monitor that keeps its place in Triton's hook chain, and hints that say
what to change. Each test asserts the message text a user acts on."""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

import re
from dataclasses import dataclass

import triton
import triton.language as tl

from zerojit.kernel import JitKernel, KernelDefinitionError, LaunchSpec, TritonJitKernel, kernel_launcher


@triton.jit(do_not_specialize=["num_tokenz"])
def _typo_kernel(out_ptr, num_tokens, BLOCK: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, BLOCK), num_tokens)


@triton.jit(do_not_specialize_on_alignment=[7])
def _bad_index_kernel(out_ptr, num_tokens, BLOCK: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, BLOCK), num_tokens)


@triton.jit(do_not_specialize=["BLOCK"])
def _constexpr_listed_kernel(out_ptr, num_tokens, BLOCK: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, BLOCK), num_tokens)


@triton.jit(do_not_specialize_on_alignment=[2])
def _constexpr_by_index_kernel(out_ptr, num_tokens, BLOCK: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, BLOCK), num_tokens)


@triton.jit(do_not_specialize=["num_tokens"], do_not_specialize_on_alignment=[0])
def _good_kernel(out_ptr, num_tokens, BLOCK: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, BLOCK), num_tokens)


def _class_over(jit_fn):
    class Fill(TritonJitKernel):
        kernel = jit_fn

        @dataclass(frozen=True)
        class CompileKey:
            block: int

        @kernel_launcher
        def __call__(self, *, out, num_tokens) -> LaunchSpec:
            return LaunchSpec(grid=(1,), kwargs=dict(BLOCK=16))

    return Fill


def test_do_not_specialize_typo_is_refused_naming_the_parameters():
    with pytest.raises(KernelDefinitionError) as e:
        _class_over(_typo_kernel)
    assert str(e.value) == (
        "Fill: do_not_specialize names 'num_tokenz', which is no parameter of kernel "
        "_typo_kernel(out_ptr, num_tokens, BLOCK); Triton ignores it, so the parameter meant is still "
        "specialized: spell it as a parameter")


def test_do_not_specialize_on_alignment_index_out_of_range_is_refused():
    with pytest.raises(KernelDefinitionError, match=re.escape(
            "do_not_specialize_on_alignment names 7, which is no parameter of kernel "
            "_bad_index_kernel(out_ptr, num_tokens, BLOCK)")):
        _class_over(_bad_index_kernel)


@pytest.mark.parametrize("jit_fn, option", [(_constexpr_listed_kernel, "do_not_specialize"),
                                            (_constexpr_by_index_kernel, "do_not_specialize_on_alignment")])
def test_a_constexpr_listed_as_not_specialized_is_refused(jit_fn, option):
    with pytest.raises(KernelDefinitionError) as e:
        _class_over(jit_fn)
    assert f"{option} names 'BLOCK', a tl.constexpr parameter of kernel {jit_fn.fn.__name__}(out_ptr, " \
           "num_tokens, BLOCK)" in str(e.value)
    assert f"drop it from {option}, or make 'BLOCK' a plain parameter" in str(e.value)


def test_valid_hints_by_name_and_index_pass():
    assert _class_over(_good_kernel).name == "good"


def test_host_only_name_the_launcher_does_not_take_names_its_inputs():
    with pytest.raises(KernelDefinitionError) as e:
        class Fill(TritonJitKernel):
            kernel = _good_kernel

            @kernel_launcher(host_only=("num_tokenz",))
            def __call__(self, *, out, num_tokens) -> LaunchSpec: ...
    assert ("host_only names unknown inputs ['num_tokenz']; the launcher's inputs are (out, num_tokens): "
            "list only those") in str(e.value)


def test_compile_key_must_be_hashable_by_value():
    with pytest.raises(KernelDefinitionError, match=re.escape(
            "Bad.CompileKey must be hashable and compared by value: use @dataclass(frozen=True) without eq=False")):
        class Bad(JitKernel):
            @dataclass(frozen=True, eq=False)
            class CompileKey:
                a: int

    with pytest.raises(KernelDefinitionError, match=re.escape(
            "Listy.CompileKey field 'blocks' is typed list[int], which is not hashable: use a tuple or a frozenset")):
        class Listy(JitKernel):
            @dataclass(frozen=True)
            class CompileKey:
                blocks: list[int]

    with pytest.raises(KernelDefinitionError, match=re.escape(
            "Loose.CompileKey must be a frozen dataclass: decorate it with @dataclass(frozen=True)")):
        class Loose(JitKernel):
            @dataclass
            class CompileKey:
                a: int

    class Fine(JitKernel):
        @dataclass(frozen=True)
        class CompileKey:
            blocks: tuple[int, ...]
            name: str = "x"

    assert hash(Fine.CompileKey((1, 2)))


# --------------------------------------------------------------------------- 2. warm-up checks itself
import torch  # noqa: E402

from zerojit.keyspace import KeySpaceError, choices, int_range, trace_dispatch  # noqa: E402
from zerojit.registry import JitWarmupRegistry  # noqa: E402
from zerojit.specialization import WarmupTensor, scalar_rep  # noqa: E402


@triton.jit
def _tile_kernel(out_ptr, num_tokens, BLOCK: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, BLOCK), num_tokens)


class Tile(TritonJitKernel["Tile.CompileKey"]):
    """The key holds the tile; the launcher dispatches it from the token count it is given."""

    kernel = _tile_kernel
    rep_slip = False  # True: warmup_inputs feeds scalar_rep(tile) where the tile itself was meant

    @dataclass(frozen=True)
    class CompileKey:
        tile: int

    def dispatch(self, *, tile: int) -> "Tile.CompileKey":
        return self.CompileKey(tile=tile)

    def get_warmup_keys(self, *, tiles=(16, 2048)) -> list:
        return trace_dispatch(self.dispatch)(tile=choices(*tiles))

    def warmup_inputs(self, key) -> dict:
        return dict(out=WarmupTensor(torch.float32, (key.tile,)), num_tokens=scalar_rep(64),
                    tile=scalar_rep(key.tile) if self.rep_slip else key.tile)

    @kernel_launcher(host_only=("tile",))
    def __call__(self, *, out, num_tokens, tile) -> LaunchSpec:
        key = self.dispatch(tile=tile)
        return LaunchSpec(grid=(1,), kwargs=dict(BLOCK=key.tile))


def test_warmup_launch_that_dispatches_another_key_fails_that_key(compile_only_target):
    slip = Tile()
    slip.rep_slip = True
    with pytest.raises(KernelDefinitionError) as e:
        slip.compile(Tile.CompileKey(2048))
    assert str(e.value).startswith(
        "tile: the warm-up launch of key Tile.CompileKey(tile=2048) dispatched key Tile.CompileKey(tile=16): "
        "field 'tile' differs (warmed 2048, the launch dispatched 16). warmup_inputs(key) must give inputs that "
        "dispatch to the key being warmed")
    assert "scalar_rep(v) stands for v's specialization class, not for v" in str(e.value)

    reg = JitWarmupRegistry()
    with reg.activate():
        slip.register_warmup()
    report = reg.warmup(progress=False, raise_on_failure=False)
    (failure,) = report.failures  # 16 dispatches 16 (scalar_rep(16) == 16): only 2048 fails, with the others
    assert failure.key == Tile.CompileKey(2048)
    assert "KernelDefinitionError: tile: the warm-up launch of key Tile.CompileKey(tile=2048)" in str(failure)
    assert "field 'tile' differs (warmed 2048, the launch dispatched 16)" in failure.error
    assert [v.key for v in report.variants] == [Tile.CompileKey(16)]


def test_a_warmup_whose_inputs_dispatch_the_key_compiles(compile_only_target):
    assert Tile().compile(Tile.CompileKey(32)).key == Tile.CompileKey(32)


def test_key_space_over_the_budget_is_refused_with_each_axis_size():
    with pytest.raises(KeySpaceError) as e:
        trace_dispatch(Tile().dispatch)(tile=int_range(1, 65537))
    assert str(e.value) == (
        "tile: the declared key space gives more than 4096 keys (axes: tile 65536 = 65536 points); an axis that "
        "large is usually a per-request value in the key: pass it to a do_not_specialize parameter or bucket it "
        "in dispatch; if every key is meant, set key_budget on the kernel class or pass "
        "trace_dispatch(..., budget=N)")
    with pytest.raises(KeySpaceError, match=r"more than 8 keys \(axes: tile 9 = 9 points\)"):
        trace_dispatch(Tile().dispatch, budget=8)(tile=int_range(1, 10))

    class Wide(Tile):
        key_budget = 70_000

    assert len(trace_dispatch(Wide().dispatch)(tile=int_range(1, 65537))) == 65536


# --------------------------------------------------------------------------- 3. unbounded growth
import logging  # noqa: E402

from _kernels import LastBlock  # noqa: E402  the bug report's kernel: its block-table width is a constexpr
from zerojit import monitor  # noqa: E402
from zerojit.audit import CoverageAudit, build_audit  # noqa: E402
from zerojit.monitor import JitMonitor, RuntimeJitError  # noqa: E402


@pytest.fixture
def warmed_last_block(compile_only_target):
    LastBlock.kernel.device_caches.clear()
    reg = JitWarmupRegistry()
    with reg.activate():
        LastBlock().register_warmup(max_blocks=16)
    report = reg.warmup(progress=False, target="cuda:90")
    yield report
    monitor.shutdown()
    for m in monitor.installed_monitors():
        m.uninstall()
    LastBlock.kernel.device_caches.clear()


def _monitor_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "zerojit.monitor"]


def test_a_growing_constexpr_is_logged_once_with_the_fix_and_counted(warmed_last_block, caplog):
    caplog.set_level(logging.WARNING, logger="zerojit.monitor")
    out = torch.zeros(4, dtype=torch.int32)
    with JitMonitor("error", report=warmed_last_block) as mon:
        for width in range(17, 17 + 199):  # 199 block-table widths, each a new constexpr value
            with pytest.raises(RuntimeJitError):
                LastBlock()(block_table=torch.zeros(4, width, dtype=torch.int32), out=out)
        lines = _monitor_lines(caplog)
        assert len(lines) == 9, lines  # the first 8 values one line each, then one growth line, then quiet
        assert lines[8] == (
            "zerojit: kernel 'last_block': parameter 'MAX_BLOCKS' has taken more than 8 distinct values after "
            "warm-up (9 so far), so every new value compiles: move the bound out of the key: make 'MAX_BLOCKS' a "
            "plain int parameter listed in triton.jit's do_not_specialize (or bucket it to a few values in "
            "dispatch); further values of it are counted, not logged")
        assert mon.counts().blocked == 199 and mon.counts().distinct == 199
        (growing,) = mon.growing()
        assert (growing.kernel, growing.parameter, growing.count) == ("last_block", "MAX_BLOCKS", 199)

        audit = build_audit(None, mon)
    assert ("growing: kernel 'last_block' parameter 'MAX_BLOCKS' took 199 distinct values after warm-up: move "
            "the bound out of the key") in audit.table()
    data = audit.to_dict()
    assert data["growing"] == [{"kernel": "last_block", "parameter": "MAX_BLOCKS", "count": 199,
                                "fix": growing.fix}]
    assert CoverageAudit.from_dict(data) == audit


def test_growth_limit_is_configurable_and_warn_mode_logs_once(warmed_last_block, caplog):
    caplog.set_level(logging.WARNING, logger="zerojit.monitor")
    out = torch.zeros(4, dtype=torch.int32)
    with JitMonitor("warn", report=warmed_last_block, growth_limit=2) as mon:
        for width in (24, 32, 40, 48, 24):
            LastBlock()(block_table=torch.zeros(4, width, dtype=torch.int32), out=out)
        lines = _monitor_lines(caplog)
    assert len(lines) == 3, lines
    assert "MAX_BLOCKS: warmed as constexpr 16, called as constexpr 24" in lines[0]
    assert "parameter 'MAX_BLOCKS' has taken more than 2 distinct values after warm-up (3 so far)" in lines[2]
    assert mon.counts().compiled == 4 and mon.growing()[0].count == 4


def test_growth_fixes_name_the_triton_option_for_each_kind():
    from zerojit.growth import GrowthTracker, bounding_fix
    from zerojit.specialization import SpecClass

    assert bounding_fix("num_tokens", "int", False) == "list 'num_tokens' in triton.jit's do_not_specialize"
    assert bounding_fix("x_ptr", "pointer", False) == "list 'x_ptr' in triton.jit's do_not_specialize_on_alignment"
    tracker = GrowthTracker(limit=1)
    assert tracker.observe("k", ("x_ptr",), (SpecClass("*fp32", "D"),)) == ([], False)
    crossed, quiet = tracker.observe("k", ("x_ptr",), (SpecClass("*fp32", ""),))
    assert [g.fix for g in crossed] == ["list 'x_ptr' in triton.jit's do_not_specialize_on_alignment"] and quiet


# --------------------------------------------------------------------------- 4. error mode never degrades silently
from triton import knobs as _knobs  # noqa: E402


def _cached(fn) -> int:
    return sum(len(c[0]) for c in fn.device_caches.values())


def _width(w: int) -> dict:
    return dict(block_table=torch.zeros(4, w, dtype=torch.int32), out=torch.zeros(4, dtype=torch.int32))


@pytest.mark.parametrize("chains", [True, False], ids=["tracer-chains", "tracer-replaces"])
def test_hook_replaced_after_install_still_blocks_before_compiling(warmed_last_block, caplog, chains):
    caplog.set_level(logging.WARNING, logger="zerojit.monitor")
    traced = []
    try:
        with JitMonitor("error", report=warmed_last_block) as mon:
            old = _knobs.runtime.jit_cache_hook

            def tracer(**kw):  # a profiler installing its hook, chaining to the one it read (or not)
                traced.append(kw["fn"].name)
                return old(**kw) if chains else None

            _knobs.runtime.jit_cache_hook = tracer
            assert mon.installed
            before = _cached(LastBlock.kernel)
            with pytest.raises(RuntimeJitError) as err:
                LastBlock()(**_width(24))
            assert "would compile at run time, after warm-up; the JIT monitor is in error mode, so nothing was " \
                   "compiled" in str(err.value)
            assert "direct triton.compile" not in str(err.value)
            assert traced == ["_last_block_kernel"] and _cached(LastBlock.kernel) == before
            assert mon.counts().blocked == 1 and mon.counts().direct_compiles == 0
        assert _knobs.runtime.jit_cache_hook is tracer  # uninstalled: the tracer's hook is back on top
    finally:
        _knobs.runtime.jit_cache_hook = None
    lines = [line for line in _monitor_lines(caplog) if "was replaced" in line]
    assert lines == [
        "zerojit: Triton's jit_cache_hook was replaced after the JIT monitor was installed (by "
        "test_hook_replaced_after_install_still_blocks_before_compiling.<locals>.tracer); the monitor keeps its "
        "place on top and calls the new one first, so error mode still sees every compile"]


def test_warn_mode_logs_the_replacement_once(warmed_last_block, caplog):
    caplog.set_level(logging.WARNING, logger="zerojit.monitor")
    try:
        with JitMonitor("warn", report=warmed_last_block) as mon:
            _knobs.compilation.listener = None
            _knobs.compilation.listener = None
            LastBlock()(**_width(24))
            assert mon.installed and mon.counts().compiled == 1 and mon.counts().direct_compiles == 0
    finally:
        _knobs.compilation.listener = None
    assert sum("compile listener was replaced" in line for line in _monitor_lines(caplog)) == 1


def test_a_write_past_the_guard_is_detected_and_repaired_at_the_next_launch(warmed_last_block):
    try:
        with JitMonitor("error", report=warmed_last_block) as mon:
            _knobs.runtime.__dict__["jit_cache_hook"] = None  # e.g. knobs.runtime.scope() restoring its dict
            assert not mon.installed  # tells the truth
            LastBlock()(**_width(16))  # a warmed key: a hit; the launch puts the monitor back
            assert mon.installed
            with pytest.raises(RuntimeJitError):
                LastBlock()(**_width(24))
    finally:
        _knobs.runtime.__dict__.pop("jit_cache_hook", None)


@pytest.mark.parametrize("named", [True, False], ids=["names-what-it-calls", "foreign"])
def test_monitors_around_a_chaining_hook_find_each_other_when_it_names_what_it_calls(warmed_last_block, caplog,
                                                                                     named):
    """A monitor, then a hook written past the guard that calls the hook it replaced (as zerojit's
    runner writes its request-path clock), then a second monitor, as ``zerojit run`` nests them.
    When the hook names what it calls (``monitor.CHAINED_TO``) neither monitor takes the other for
    a replacement. Either way error mode blocks before compiling, with both monitors installed and
    with the outer one alone."""
    from zerojit import triton_compat as tc

    caplog.set_level(logging.WARNING, logger="zerojit.monitor")

    class Chaining:
        def __init__(self, below):
            self.below = below

        def __call__(self, **kw):
            return self.below(**kw) if self.below is not None else None

    class Named(Chaining):
        @property
        def zerojit_chained_to(self):
            return self.below

    assert monitor.CHAINED_TO == "zerojit_chained_to"
    before = tc.get_cache_hook()
    try:
        with JitMonitor("error", report=warmed_last_block) as outer:
            hook = (Named if named else Chaining)(tc.get_cache_hook())
            tc.set_cache_hook(hook)
            with JitMonitor("error", report=warmed_last_block) as inner:
                LastBlock()(**_width(16))  # a warmed key: a hit, seen by both
                with pytest.raises(RuntimeJitError):
                    LastBlock()(**_width(24))
                assert inner.installed and (outer.installed or not named)
            LastBlock()(**_width(16))
            assert outer.counts().launches == 2 and inner.counts().launches == 1
            assert _cached(LastBlock.kernel) == 1
            with pytest.raises(RuntimeJitError):  # the hooks are checked before a launch that may compile
                LastBlock()(**_width(24))
            assert _cached(LastBlock.kernel) == 1
    finally:
        tc.set_cache_hook(before)
    lines = [line for line in _monitor_lines(caplog) if "was replaced" in line]
    if named:  # (a foreign hook the inner monitor's install found on top is kept below it, unremarked)
        assert lines == []


def test_a_zerojit_launch_after_a_write_past_the_guard_is_blocked_before_it_compiles(warmed_last_block):
    try:
        with JitMonitor("error", report=warmed_last_block) as mon:
            _knobs.runtime.__dict__["jit_cache_hook"] = None
            before = _cached(LastBlock.kernel)
            with pytest.raises(RuntimeJitError) as err:  # the launch path repairs the chain before Triton runs
                LastBlock()(**_width(24))
            assert "so nothing was compiled" in str(err.value)
            assert _cached(LastBlock.kernel) == before and mon.installed
            assert mon.counts().blocked == 1 and mon.counts().compiled == 0
    finally:
        _knobs.runtime.__dict__.pop("jit_cache_hook", None)


def test_a_compile_past_a_replaced_hook_is_named_so_and_repairs_the_chain(warmed_last_block):
    try:
        with JitMonitor("error", report=warmed_last_block) as mon:
            _knobs.runtime.__dict__["jit_cache_hook"] = None
            table, out = torch.zeros(4, 24, dtype=torch.int32), torch.zeros(4, dtype=torch.int32)
            with pytest.raises(RuntimeJitError) as err:  # a raw launch: compiled first (nothing could stop it), then named
                LastBlock.kernel[(4,)](table, out, 4, MAX_BLOCKS=24)
            msg = str(err.value)
            assert "while another party had replaced Triton's jit_cache_hook past the monitor, which could not block " \
                   "it; the monitor has put itself back on top" in msg
            assert "direct triton.compile" not in msg
            assert mon.installed
            with pytest.raises(RuntimeJitError) as err:
                LastBlock()(**_width(32))
            assert "so nothing was compiled" in str(err.value)
    finally:
        _knobs.runtime.__dict__.pop("jit_cache_hook", None)


# --------------------------------------------------------------------------- 5. messages that mislead today
from zerojit.audit import KernelCoverage, RuntimeMiss, WarmedKey  # noqa: E402
from zerojit.monitor import ArgDifference, class_words  # noqa: E402
from zerojit.specialization import SpecClass  # noqa: E402


@triton.jit(do_not_specialize_on_alignment=["y_ptr"])
def _tokens_kernel(x_ptr, y_ptr, num_tokens, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(y_ptr + offs) + num_tokens)


class Tokens(TritonJitKernel["Tokens.CompileKey"]):
    """A token count left a specialized int; a tile over 14 declared widths, one of them used."""

    kernel = _tokens_kernel

    @dataclass(frozen=True)
    class CompileKey:
        block: int

    def dispatch(self, *, block: int) -> "Tokens.CompileKey":
        return self.CompileKey(block)

    def get_warmup_keys(self, *, blocks) -> list:
        return trace_dispatch(self.dispatch)(block=choices(*blocks))

    def warmup_inputs(self, key) -> dict:
        return dict(x=WarmupTensor(torch.float32, (key.block,)), y=WarmupTensor(torch.float32, (key.block,)),
                    num_tokens=scalar_rep(64), block=key.block)

    @kernel_launcher(host_only=("block",))
    def __call__(self, *, x, y, num_tokens, block: int = 16) -> LaunchSpec:
        return LaunchSpec(grid=(1,), kwargs=dict(BLOCK=self.dispatch(block=block).block))


def test_token_count_seen_as_1_16_17_and_14_variants_with_13_dead(compile_only_target):
    _tokens_kernel.device_caches.clear()
    reg = JitWarmupRegistry()
    blocks = tuple(2 ** i for i in range(14))  # 14 declared variants: 1 .. 8192
    with reg.activate():
        Tokens().register_warmup(blocks=blocks)
    report = reg.warmup(progress=False, target="cuda:90")
    try:
        with JitMonitor("error", report=report) as mon:
            x = torch.zeros(16)
            Tokens()(x=x, y=x, num_tokens=16, block=16)  # the one variant this traffic uses
            errors = {}
            for n in (1, 17):
                with pytest.raises(RuntimeJitError) as err:
                    Tokens()(x=x, y=x, num_tokens=n, block=16)
                errors[n] = str(err.value)
            audit = build_audit(None, mon)
    finally:
        _tokens_kernel.device_caches.clear()
    one = errors[1]
    assert "num_tokens: warmed as divisible-by-16, called as equal-to-one" in one
    assert ("the run passed 1, which Triton compiles as its own equal-to-one variant; if 'num_tokens' varies per "
            "request (a token count), list it in triton.jit's do_not_specialize") in one
    assert "divisibility by 16 differs" in errors[17] and "do_not_specialize" in errors[17]
    # a pointer in do_not_specialize_on_alignment is not "unaligned"
    assert "y_ptr: *fp32 alignment not specialized" in one and "unaligned" not in one

    k = audit.kernel("tokens")
    assert len(k.warmed) == 14 and len(k.hit) == 1 and len(k.dead) == 13
    assert all(w.seconds > 0 for w in k.dead) and audit.dead_seconds == pytest.approx(sum(w.seconds for w in k.dead))
    table = audit.table()
    assert table.count("s of warm-up)") == 13
    # the audit carries error mode's fix hints
    assert "-> the run passed 1, which Triton compiles as its own equal-to-one variant" in table
    assert audit.to_dict()["kernels"][0]["misses"][0]["hints"][0].startswith("the run passed 1")
    # 13 dead keys beside misses nearest to the live key: unreached, not "warm-up and dispatch may disagree"
    assert audit.dead_notes() == ["dead keys beside misses nearest to other keys (tokens): keys of the declared key "
                                  "space that this traffic did not reach; each MISS is explained by its own nearest key"]
    assert not any("may disagree" in n for n in audit.dead_notes())


def test_dead_key_nearest_to_a_miss_says_warm_up_and_dispatch_may_disagree():
    miss = RuntimeMiss("n: i32 equal-to-one", 1, 0, 0, 1, nearest_key="K(block=32)",
                       differences=("n: warmed as divisible-by-16, called as equal-to-one",))
    near = CoverageAudit(kernels=(KernelCoverage("k", warmed=(WarmedKey("K(block=16)", 3), WarmedKey("K(block=32)", 0)),
                                                 misses=(miss,)),))
    assert near.dead_notes() == ["a miss nearest to a dead key (k): warm-up and dispatch may disagree; compare that "
                                 "MISS with its nearest warmed key"]


def test_a_constexpr_equal_to_one_is_a_constexpr_value():
    d = ArgDifference("BLOCK", SpecClass("constexpr", 1), SpecClass("constexpr", 2), constexpr=True)
    assert str(d) == "BLOCK: warmed as constexpr 1, called as constexpr 2"
    assert "literal 1" not in d.hint and "request-dependent bound a do_not_specialize int" in d.hint
    assert class_words(SpecClass("constexpr", 1)) == "equal-to-one"  # an int equal to one stays so
    assert class_words(SpecClass("*fp16", ""), alignment_specialized=False) == "*fp16 alignment not specialized"


def test_literal_one_warmed_while_the_run_passes_64_names_scalar_rep():
    d = ArgDifference("block_size", SpecClass("constexpr", 1), SpecClass("i32", "D"))
    assert str(d) == "block_size: warmed as equal-to-one, called as divisible-by-16"
    assert "warm-up passed the literal 1" in d.hint and "scalar_rep(64) == 16" in d.hint


def test_checked_kernel_warm_up_compares_key_for_of_its_inputs(compile_only_target):
    from zerojit.inputs import CheckedKernel, IntArg, TensorArg, checked_launcher

    class CheckedTile(CheckedKernel["CheckedTile.CompileKey"]):
        kernel = _tile_kernel

        @dataclass(frozen=True)
        class CompileKey:
            tile: int

        def dispatch(self, *, tile: int) -> "CheckedTile.CompileKey":
            return self.CompileKey(tile=tile)

        def get_warmup_keys(self) -> list:
            return [self.CompileKey(2048)]

        def warmup_inputs(self, key) -> dict:
            return dict(out=WarmupTensor(torch.float32, (key.tile,)), num_tokens=64, tile=scalar_rep(key.tile))

        @checked_launcher(TensorArg("out", 1, dtype=torch.float32), IntArg("num_tokens"), IntArg("tile", low=1))
        def __call__(self, key, constexprs, *, out, num_tokens, tile) -> LaunchSpec:
            return LaunchSpec(grid=(1,), kwargs=dict(BLOCK=key.tile))

    with pytest.raises(KernelDefinitionError) as e:
        CheckedTile().compile(CheckedTile.CompileKey(2048))
    assert "CheckedTile.CompileKey(tile=2048) dispatched key " in str(e.value)
    assert "field 'tile' differs (warmed 2048, the launch dispatched 16)" in str(e.value)
