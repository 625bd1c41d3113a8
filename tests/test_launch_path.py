"""The launch path: positional argument plans, and the fast path that launches warmed variants directly.

Everything runs on CPU under ``compile_only("cuda:90")`` with real compiled variants. Selection is
checked through :meth:`TritonJitKernel.select_variant` (no launch); launches that must reach a
launcher go through a stub driver that is not the compile-only one, with each compiled kernel's
launcher replaced by a recorder, so the normal path (Triton's own ``JITFunction.run``) and the
fast path can be compared argument for argument.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from triton import knobs
from triton.runtime.driver import driver
from triton.runtime.jit import compute_cache_key

from zerojit import JitWarmupRegistry, triton_compat
from zerojit import kernel as zkernel
from zerojit._launch import FAST_PATH_ENV
from zerojit.audit import build_audit
from zerojit.compile_only import compile_only
from zerojit.kernel import FastVariant, LaunchSpec, TritonJitKernel, kernel_launcher, set_launch_observer
from zerojit.monitor import JitMonitor, RuntimeJitError
from zerojit.specialization import WarmupTensor, bind, scalar_rep

_SCALE = tl.constexpr(2)  # a global the kernel reads: Triton checks it has not changed


@triton.jit(do_not_specialize=["n"], do_not_specialize_on_alignment=["y_ptr"])
def _probe_kernel(x_ptr, y_ptr, out_ptr, n, stride, period, alpha, flag, w: tl.int64, bias_ptr,
                  BLOCK: tl.constexpr, MODE: tl.constexpr = 0):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x_ptr + offs * stride, mask=mask) + tl.load(y_ptr + offs % period, mask=mask) * alpha
    if MODE == 1:
        v = v * _SCALE
    if flag:
        v = v + w
    if bias_ptr is not None:
        v = v + tl.load(bias_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, v, mask=mask)


class Probe(TritonJitKernel["Probe.CompileKey"]):
    """Every kind of argument: pointers (one without alignment specialization), a
    ``do_not_specialize`` int, specialized ints, a float, a bool, an annotated int, an optional
    pointer, constexprs (one with a default) and a launch option."""

    kernel = _probe_kernel
    fast_path = True

    @dataclass(frozen=True)
    class CompileKey:
        x_aligned: bool = True
        stride: int = 16  # scalar_rep classes
        period: int = 17
        bias: bool = False
        num_warps: int | None = None

    def dispatch(self, **_):
        raise NotImplementedError

    def get_warmup_keys(self):
        return [self.CompileKey(), self.CompileKey(x_aligned=False), self.CompileKey(stride=1),
                self.CompileKey(bias=True), self.CompileKey(num_warps=8)]

    def warmup_inputs(self, key):
        f32 = torch.float32
        return dict(x=WarmupTensor(f32, (64,), aligned=key.x_aligned), y=WarmupTensor(f32, (64,)),
                    out=WarmupTensor(f32, (64,)), n=scalar_rep(100, specialize=False), stride=key.stride,
                    period=key.period, alpha=0.5, flag=True, w=17,
                    bias=WarmupTensor(f32, (64,)) if key.bias else None, num_warps=key.num_warps)

    @kernel_launcher(host_only=("block", "mode", "num_warps"))
    def __call__(self, *, x, y, out, n, stride, period, alpha=1.0, flag=False, w=17, bias=None, block=64,
                 mode=None, num_warps=None) -> LaunchSpec:
        kwargs = {"BLOCK": block}
        if mode is not None:
            kwargs["MODE"] = mode
        if num_warps is not None:
            kwargs["num_warps"] = num_warps
        return LaunchSpec(grid=((n + block - 1) // block,), kwargs=kwargs, returns=out)


probe = Probe()


@pytest.fixture(scope="module")
def warmed(tmp_path_factory):
    """Probe's five keys compiled for cuda:90 (no GPU), with the fast path recording them."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(knobs.cache, "dir", str(tmp_path_factory.mktemp("triton-cache-launch")))
        with compile_only("cuda:90") as co:
            registry = JitWarmupRegistry()
            with registry.activate():
                probe.register_warmup()
            report = registry.warmup(progress=False)
            yield co, report


@pytest.fixture
def co(warmed):
    return warmed[0]


def variant_of(report, key):
    return next(v for v in report.variants if v.key == key)


def inputs(**over):
    """Launch inputs in the classes of Probe's default key, overridable."""
    base = dict(x=torch.zeros(256), y=torch.zeros(64), out=torch.zeros(256), n=250, stride=48, period=33,
                alpha=3.0, flag=False, w=33)
    base.update(over)
    return base


def triton_key_of(**inp):
    """Triton's own cache key for these launch inputs (its binder, positional like zerojit)."""
    kw = {k: inp[k] for k in ("num_warps",) if inp.get(k) is not None}
    args = (inp["x"], inp["y"], inp["out"], inp["n"], inp["stride"], inp["period"], inp.get("alpha", 1.0),
            inp.get("flag", False), inp.get("w", 17), inp.get("bias"), inp.get("block", 64))
    if inp.get("mode") is not None:
        args += (inp["mode"],)
    _, spec, opts = bind(_probe_kernel, *args, **kw)
    return compute_cache_key({}, spec, opts)


# --- selection: the warmed variant, or None ---------------------------------------------------------


def test_every_warmup_is_recorded_as_a_fast_variant(warmed):
    co, report = warmed
    fast = probe.fast_variants(co.device)
    assert len(fast) == len(report.variants) == 5
    for f, v in zip(fast, report.variants):
        assert isinstance(f, FastVariant) and f.compiled is v.compiled and f.triton_key == v.triton_key
        assert f.specialization == v.specialization and f.param_names == v.param_names


def test_same_classes_select_the_warmed_variant(warmed):
    co, report = warmed
    want = variant_of(report, Probe.CompileKey())
    for over in [{}, dict(n=1), dict(n=2**31 - 1), dict(stride=2**31 - 16), dict(period=3), dict(alpha=-0.0),
                 dict(flag=True), dict(w=2**40 + 1), dict(w=-15), dict(mode=0), dict(y=torch.zeros(65)[1:])]:
        got = probe.select_variant(**inputs(**over))
        assert got is not None, over
        assert got.compiled is want.compiled and got.triton_key == want.triton_key == triton_key_of(**inputs(**over))


@pytest.mark.parametrize("over, key", [
    (dict(x=torch.zeros(257)[1:]), Probe.CompileKey(x_aligned=False)),
    (dict(stride=1), Probe.CompileKey(stride=1)),
    (dict(bias=torch.zeros(256)), Probe.CompileKey(bias=True)),
    (dict(num_warps=8), Probe.CompileKey(num_warps=8)),
])
def test_each_warmed_class_selects_its_own_variant(warmed, over, key):
    _, report = warmed
    got = probe.select_variant(**inputs(**over))
    assert got is not None and got.compiled is variant_of(report, key).compiled


@pytest.mark.parametrize("why, over", [
    ("pointer alignment (an unaligned x was warmed, but not with stride 1)", dict(x=torch.zeros(257)[1:], stride=1)),
    ("int: other where divisible-by-16 was warmed", dict(stride=17)),
    ("int: equal-to-one where other was warmed", dict(period=1)),
    ("int: divisible-by-16 where other was warmed", dict(period=32)),
    ("int width i64", dict(stride=2**32)),
    ("int width u64", dict(period=2**63 + 1)),
    ("int width of a do_not_specialize int", dict(n=2**31)),
    ("annotated int equal to one", dict(w=1)),
    ("annotated int divisible by 16", dict(w=32)),
    ("a bool where an int was warmed", dict(stride=True)),
    ("an int where a float was warmed", dict(alpha=3)),
    ("an int where a bool was warmed", dict(flag=1)),
    ("tensor dtype", dict(x=torch.zeros(256, dtype=torch.float16))),
    ("tensor subclass", dict(x=torch.nn.Parameter(torch.zeros(256)))),
    ("a numpy int", dict(period=__import__("numpy").int64(33))),
    ("constexpr value", dict(block=128)),
    ("constexpr type (False == 0 in Python, not in Triton's key)", dict(mode=False)),
    ("constexpr -0.0 vs 0", dict(mode=-0.0)),
    ("launch option passed explicitly with its default", dict(num_warps=4)),
    ("launch option value", dict(num_warps=2)),
])
def test_unprovable_arguments_take_the_normal_path(warmed, why, over):
    assert probe.select_variant(**inputs(**over)) is None, why


def test_int_overflow_is_normal_path_and_raises_like_triton(co):
    assert probe.select_variant(**inputs(n=2**64)) is None
    with pytest.raises(OverflowError):
        probe(**inputs(n=2**64))


@pytest.mark.parametrize("state", ["hooks", "exit hook", "pre_run_hooks", "global", "debug", "instrumentation",
                                   "fast_path off", "device", "warm-up", "empty grid"])
def test_unprovable_process_state_takes_the_normal_path(warmed, monkeypatch, state):
    assert probe.select_variant(**inputs()) is not None
    over = {}
    if state == "hooks":
        monkeypatch.setattr(knobs.runtime.launch_enter_hook, "calls", [lambda metadata: None])
    elif state == "exit hook":
        monkeypatch.setattr(knobs.runtime, "launch_exit_hook", lambda metadata: None)
    elif state == "pre_run_hooks":
        monkeypatch.setattr(_probe_kernel, "pre_run_hooks", [lambda *a, **k: None])
    elif state == "global":
        monkeypatch.setitem(_probe_kernel.fn.__globals__, "_SCALE", tl.constexpr(3))
        assert _probe_kernel.used_global_vals, "Triton records the globals a kernel reads when it compiles"
    elif state == "debug":
        monkeypatch.setattr(knobs.runtime, "debug", True)
    elif state == "instrumentation":
        monkeypatch.setattr(knobs.compilation, "instrumentation_mode", "consan")
    elif state == "fast_path off":
        monkeypatch.setattr(probe, "fast_path", False)
    elif state == "device":
        with compile_only("cuda:80"):  # another device: nothing was warmed there
            assert probe.select_variant(**inputs()) is None
        return
    elif state == "warm-up":
        token = zkernel._WARMUP_SINK.set([])
        try:
            assert probe.select_variant(**inputs()) is None
        finally:
            zkernel._WARMUP_SINK.reset(token)
        return
    elif state == "empty grid":
        over = dict(n=0)
    assert probe.select_variant(**inputs(**over)) is None


def test_changed_global_raises_through_the_normal_path(co, monkeypatch):
    monkeypatch.setitem(_probe_kernel.fn.__globals__, "_SCALE", tl.constexpr(3))
    with pytest.raises(RuntimeError, match="Global variable _SCALE has changed"):
        probe(**inputs())


def test_a_variant_recorded_again_replaces_the_remembered_hits(warmed):
    """A fast launcher remembers its last two hits (no hash for a key launched again); a record of
    such a key with another CompiledKernel (a warm-up after Triton's cache was cleared) is the one
    selected next, not the remembered one."""
    import dataclasses

    from zerojit._launch import _FastTables

    class Again(TritonJitKernel):  # its own tables (a subclass of Probe would share Probe's)
        kernel = _probe_kernel
        fast_path = True
        __call__ = Probe.__call__

    again = Again()
    records = Probe._launch_state.fast.records
    device, args, otoken, first = next(r for r in records if r[3].triton_key == triton_key_of(**inputs()))
    one = next(r for r in records if r[3].triton_key == triton_key_of(**inputs(stride=1)))
    tables = Again._launch_state.fast = _FastTables(Again._launch_state)
    tables.record(device, args, otoken, first)
    tables.record(*one)
    assert again.select_variant(**inputs()) is first
    assert again.select_variant(**inputs(stride=1)) is one[3]
    assert again.select_variant(**inputs(n=1000)) is first  # one of the two remembered hits
    second = dataclasses.replace(first, compiled=object())
    tables.record(device, args, otoken, second)
    assert again.select_variant(**inputs(n=64)) is second
    assert again.select_variant(**inputs(stride=1)) is one[3]
    assert again.select_variant(**inputs(stride=17)) is None  # a key no record has
    assert again.select_variant(**inputs()) is second


def test_optional_argument_warmed_both_ways_selects_both(warmed):
    _, report = warmed
    none = probe.select_variant(**inputs())
    some = probe.select_variant(**inputs(bias=torch.zeros(256)))
    assert none.compiled is variant_of(report, Probe.CompileKey()).compiled
    assert some.compiled is variant_of(report, Probe.CompileKey(bias=True)).compiled
    assert probe.select_variant(**inputs(bias=torch.zeros(257)[1:])) is None  # bias_ptr warmed aligned only
    assert probe.select_variant(**inputs(bias=torch.zeros(256, dtype=torch.int32))) is None


_ints = st.one_of(
    st.sampled_from([0, 1, 2, 15, 16, 17, 32, 48, -1, -16, -17, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1,
                     2**32, 2**63 - 1, 2**63, 2**63 + 16, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1]),
    st.integers(-(2**65), 2**65),
)


def _near(*warmed_class_values):
    """Values of a warmed class (often) or of any class (the edges, or anything)."""
    return st.one_of(st.sampled_from(warmed_class_values), st.sampled_from(warmed_class_values), _ints)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.one_of(st.integers(1, 2**31 - 1), st.integers(1, 2**65)), stride=_near(16, 48, 2**31 - 16, 1),
       period=_near(3, 17, 33, 2**31 - 1), w=_near(17, 33, -15, 2**40 + 1), x_offset=st.sampled_from([0, 0, 0, 1, 2, 4]),
       y_offset=st.integers(0, 8), flag=st.booleans(), block=st.sampled_from([64, 64, 64, 128]),
       mode=st.sampled_from([None, None, 0, 1, False, 0.0]), num_warps=st.sampled_from([None, None, 4, 8]),
       bias_offset=st.sampled_from([None, None, 0, 1]))
def test_selection_never_differs_from_triton_and_finds_every_warmed_class(
        warmed, n, stride, period, w, x_offset, y_offset, flag, block, mode, num_warps, bias_offset):
    """The safety property: a selected variant is the one Triton's own key names; and every launch
    whose Triton key was warmed (with arguments of modelled types) is selected."""
    _, report = warmed
    inp = inputs(x=torch.zeros(300)[x_offset:x_offset + 256], y=torch.zeros(80)[y_offset:y_offset + 64], n=n,
                 stride=stride, period=period, w=w, flag=flag, block=block, mode=mode, num_warps=num_warps,
                 bias=None if bias_offset is None else torch.zeros(300)[bias_offset:bias_offset + 256])
    try:
        key = triton_key_of(**inp)
    except OverflowError:
        key = None
    got = probe.select_variant(**inp)
    event("fast path" if got is not None else "normal path")
    if got is not None:
        assert key is not None and got.triton_key == key
        assert got.compiled is _probe_kernel.device_caches[got.device][0][key]
    warmed_keys = {v.triton_key for v in report.variants}
    exact_mode = mode is None or type(mode) is int  # 0.0 / False equal 0 in Python but not in Triton's key
    if key in warmed_keys and exact_mode:
        assert got is not None and got.triton_key == key


# --- plans: the arguments Triton's binder would bind ---------------------------------------------------


def test_plan_passes_every_parameter_positionally_with_defaults(co):
    spec_kwargs = {"BLOCK": 64}
    plan = Probe._launch_state.plan(tuple(spec_kwargs)).args
    x, y, out = torch.zeros(4), torch.zeros(4), torch.zeros(4)
    args, options, otoken = plan(spec_kwargs, x, y, out, 250, 48, 33, 3.0, False, 33, None, 64, None, None)
    bound, _, _ = bind(_probe_kernel, x_ptr=x, y_ptr=y, out_ptr=out, n=250, stride=48, period=33, alpha=3.0,
                       flag=False, w=33, bias_ptr=None, BLOCK=64)
    assert args == tuple(bound.values())  # MODE's default (0) included, as Triton's binder fills it
    assert options == {} and otoken == ()
    plan = Probe._launch_state.plan(("BLOCK", "num_warps")).args
    args, options, otoken = plan({"BLOCK": 64, "num_warps": 8}, x, y, out, 250, 48, 33, 3.0, False, 33, None, 64, None, 8)
    assert options == {"num_warps": 8} and otoken == ("num_warps", int, 8)


def test_missing_parameter_still_gets_tritons_error(co):
    class Partial(TritonJitKernel):
        kernel = _probe_kernel

        @kernel_launcher
        def __call__(self, *, x, y, out, n) -> LaunchSpec:
            return LaunchSpec(grid=(1,), kwargs={"BLOCK": 16})

    t = torch.zeros(16)
    with pytest.raises(TypeError, match="stride"):
        Partial()(x=t, y=t, out=t, n=16)


# --- what reaches the launcher: the normal path, raw Triton and the fast path agree --------------------


class _StubDriver:
    """A non-compile-only driver for the compile-only device: zerojit and Triton launch for real."""

    def __init__(self, co):
        self._co = co

    def get_current_device(self):
        return self._co.device

    def get_current_stream(self, device=None):
        return 1234

    def __getattr__(self, name):
        return getattr(self._co, name)


@pytest.fixture
def launching(warmed, monkeypatch):
    """Launches reach a recorder in place of each warmed kernel's launcher: [(compiled, args)]."""
    co, report = warmed
    calls = []
    for v in report.variants:
        c = v.compiled
        monkeypatch.setattr(c, "module", object())
        monkeypatch.setattr(c, "function", 0xF00 + id(c) % 1000)
        monkeypatch.setattr(c, "_run", lambda *args, c=c: calls.append((c, args)))
    for entry in [e for table in Probe._launch_state.fast.current[1].values() for e in table.values()]:
        monkeypatch.setattr(entry, "direct", None)
    monkeypatch.setattr(driver, "_active", _StubDriver(co))
    return calls


def test_fast_path_passes_the_launcher_what_triton_passes(warmed, launching, monkeypatch):
    _, report = warmed
    for over in [{}, dict(x=torch.zeros(257)[1:]), dict(stride=1), dict(bias=torch.zeros(256)), dict(num_warps=8),
                 dict(mode=0, flag=True, n=1000)]:
        inp = inputs(**over)
        launching.clear()
        monkeypatch.setattr(probe, "fast_path", False)
        assert probe(**inp) is inp["out"]
        monkeypatch.setattr(probe, "fast_path", True)
        assert probe.select_variant(**inp) is not None
        assert probe(**inp) is inp["out"]
        kw = {"MODE": inp["mode"]} if "mode" in inp else {}
        kw.update({"num_warps": inp["num_warps"]} if "num_warps" in inp else {})
        grid = ((inp["n"] + 63) // 64,)
        _probe_kernel[grid](inp["x"], inp["y"], inp["out"], inp["n"], inp["stride"], inp["period"], inp["alpha"],
                            inp["flag"], inp["w"], inp.get("bias"), BLOCK=64, **kw)  # raw Triton
        (normal_c, normal), (fast_c, fast), (raw_c, raw) = launching
        assert normal_c is fast_c is raw_c
        assert normal[:6] == fast[:6] == raw[:6]  # grid, stream, function, packed metadata
        assert normal[6] is not None and fast[6:9] == (None, None, None)  # launch metadata, enter/exit hooks
        assert normal[9:] == fast[9:] == raw[9:]  # every kernel argument, constexprs included, in order
        assert normal[9:] == tuple(bind(_probe_kernel, *normal[9:])[0].values())


def _stub_cuda_launcher(seen: list):
    """Triton's own ``CudaLauncher`` of a kernel without scratch memory, its C entry a recorder."""
    from triton.backends.nvidia.driver import CudaLauncher

    launcher = object.__new__(CudaLauncher)
    launcher.launch = lambda *args: seen.append(args)
    launcher.num_ctas, launcher.global_scratch_size, launcher.profile_scratch_size = 1, 0, 0
    launcher.global_scratch_align = launcher.profile_scratch_align = 1
    launcher.launch_cooperative_grid, launcher.launch_pdl = False, True
    launcher.arg_annotations, launcher.kernel_signature, launcher.gsan_enabled = ("annotations",), b"sig", False
    return launcher


def test_direct_cuda_launcher_call_equals_cudalauncher_call(warmed, launching, monkeypatch):
    """The fast path's shortcut past ``CudaLauncher.__call__`` passes its C entry the same arguments
    (3.6: the kernel's own entry, arguments last; 3.7 and later: the shared entry, arguments as one tuple)."""
    _, report = warmed
    seen = []
    launcher = _stub_cuda_launcher(seen)
    inp = inputs()
    c = variant_of(report, Probe.CompileKey()).compiled
    monkeypatch.setattr(c, "_run", launcher)
    monkeypatch.setattr(probe, "fast_path", False)
    probe(**inp)  # normal path: Triton's run calls CudaLauncher.__call__
    monkeypatch.setattr(probe, "fast_path", True)
    probe(**inp)  # fast path: the launcher's C entry directly
    assert len(seen) == 2
    normal, fast = seen
    if triton_compat.VERSION < (3, 7):
        assert normal[:9] == fast[:9]  # grid, stream, function, cooperative grid, PDL, scratch x2
        assert normal[9] == fast[9]  # packed metadata
        assert normal[10] is not None and fast[10:13] == (None, None, None)  # launch metadata, hooks
        assert normal[13:] == fast[13:]  # the kernel arguments
    else:
        assert normal[:8] == fast[:8]  # grid, stream, function, cooperative grid, PDL, packed metadata
        assert normal[8] is not None and fast[8:11] == (None, None, None)  # launch metadata, hooks
        assert normal[11:15] == fast[11:15] == (None, None, ("annotations",), b"sig")  # scratch x2, annotations, signature
        assert normal[15] == fast[15] and len(fast) == 16  # the kernel arguments, one tuple
    entry = next(e for table in Probe._launch_state.fast.current[1].values() for e in table.values()
                 if e.compiled is c)
    assert entry.direct is not False and entry.direct[0] is launcher.launch  # the shortcut was taken
    launcher.global_scratch_size = 8  # scratch memory: the launcher must allocate it, no shortcut
    monkeypatch.setattr(entry, "direct", None)
    assert entry.resolve() is False
    launcher.global_scratch_size, launcher.gsan_enabled = 0, True  # 3.8's GSan: its __call__ adds arguments
    monkeypatch.setattr(entry, "direct", None)
    assert entry.resolve() is False


def test_cuda_tensors_reach_the_launcher_as_their_address(warmed, launching, monkeypatch):
    """Device tensors go to the launcher as the ints their ``data_ptr()`` are (which every launcher
    takes as is, without its driver query); a launch with any other tensor passes them as they are.
    On CPU no tensor is a device tensor (the other tests see tensors passed as they are), so the
    fact is swapped here for one that takes CPU tensors for device ones."""
    monkeypatch.setattr(triton_compat, "DEVICE_POINTER_TEST", "{tensor}.is_cpu")
    for plan in Probe._launch_state.plans.values():  # generated anew with that fact
        monkeypatch.setattr(plan, "fast", None)
    monkeypatch.setattr(Probe._launch_state.fast, "current", (*Probe._launch_state.fast.current[:2], {}))
    monkeypatch.setattr(Probe._launch_state, "fast_call", Probe._launch_state.resolve_fast)
    inp = inputs(bias=torch.zeros(256))
    launching.clear()
    monkeypatch.setattr(probe, "fast_path", False)
    probe(**inp)
    monkeypatch.setattr(probe, "fast_path", True)
    probe(**inp)
    (_, normal), (_, fast) = launching
    assert [i for i, v in enumerate(normal[9:]) if isinstance(v, torch.Tensor)] == [0, 1, 2, 9]  # x, y, out, bias
    for i, (n, f) in enumerate(zip(normal[9:], fast[9:])):
        # bias was warmed as None and as a tensor: a parameter of no one kind goes as is
        assert (type(f) is int and f == n.data_ptr()) if i in (0, 1, 2) else f is n


# --- the monitor and the audit see fast-path launches as hits -------------------------------------------


def test_monitor_and_audit_count_fast_launches_as_hits(warmed):
    _, report = warmed
    default = variant_of(report, Probe.CompileKey())
    with JitMonitor("error", report=report) as mon:
        for n in (64, 250, 1000):
            probe(**inputs(n=n))  # fast
        probe.fast_path = False
        try:
            probe(**inputs())  # normal
        finally:
            del probe.fast_path
        assert mon.counts().launches == 4 and mon.counts().runtime_compiles == 0
        audit = build_audit(report, mon)
    hits = {w.key: w.hits for w in audit.kernel("probe").warmed}
    assert hits[repr(default.key)] == 4
    assert audit.ok


def test_fast_path_miss_still_reaches_the_monitor(warmed):
    _, report = warmed
    with JitMonitor("error", report=report):
        with pytest.raises(RuntimeJitError, match="stride: warmed as"):
            probe(**inputs(stride=17))


def test_observer_sees_the_fast_launch(co):
    seen = []
    previous = set_launch_observer(lambda kernel, compiled: seen.append((kernel, compiled)))
    try:
        probe(**inputs())
    finally:
        set_launch_observer(previous)
    assert seen == [(probe, probe.select_variant(**inputs()).compiled)]


def test_monitor_counts_follow_its_mode_and_reset(warmed):
    _, report = warmed
    with JitMonitor("warn", report=report) as mon:
        for fast in (True, False, True):
            probe.fast_path = fast
            try:
                probe(**inputs())
            finally:
                del probe.fast_path
        mon.mode = "off"
        probe(**inputs())  # not counted
        mon.mode = "error"
        probe(**inputs())
        assert mon.counts().launches == 4
        assert [e.count for e in mon.snapshot().launches] == [4]
        mon.reset()
        probe(**inputs())
        assert mon.counts().launches == 1


def fast_entry(**inp):
    """The fast-path table entry a launch with these inputs uses (found as select_variant finds it)."""
    from zerojit._launch import SELECT

    method = Probe.__call__
    spec = method._zerojit_method(probe, **inp)
    values = tuple(inp.get(name, default) for name, default in method._zerojit_inputs)
    state = Probe._launch_state
    return state.fast_launcher(state.plan(tuple(spec.kwargs)))(SELECT, driver._active, spec.grid, spec.kwargs, *values)


def test_fast_launches_count_by_the_monitor_s_own_counter(warmed):
    """After the first fast launch of a variant under one monitor, later ones call the counter the
    monitor returned instead of the observer; the counts stay exact through reset, a mode switch
    to off and back, uninstall and a second install."""
    _, report = warmed
    entry = fast_entry(**inputs())
    mon = JitMonitor("error", report=report)
    with mon:
        probe(**inputs())
        assert entry.counter is not None  # the monitor's counter of that CompiledKernel
        for n in (64, 250, 1000, 4096):
            probe(**inputs(n=n))
        assert mon.counts().launches == 5
        mon.reset()
        assert entry.counter is None  # (the next launch asks the monitor again)
        probe(**inputs())
        probe(**inputs())
        assert mon.counts().launches == 2
        mon.mode = "off"
        assert entry.counter is None
        probe(**inputs())  # not counted
        mon.mode = "warn"
        probe(**inputs())
        probe(**inputs())
        assert mon.counts().launches == 4 and [e.count for e in mon.snapshot().launches] == [4]
    assert entry.counter is None
    probe(**inputs())  # uninstalled: not counted
    assert mon.counts().launches == 4
    with mon:
        probe(**inputs())
        probe(**inputs())
    assert mon.counts().launches == 6


def test_fast_launches_are_counted_exactly_under_two_monitors_and_foreign_observers(warmed):
    """Every observer in the chain sees every fast launch: two monitors count each one (neither
    hands the fast path a counter while the other is below it), a foreign observer above or below
    a monitor sees each launch and the monitor counts it."""
    _, report = warmed
    entry = fast_entry(**inputs())
    first, second = JitMonitor("error", report=report), JitMonitor("warn", report=report)
    seen = []
    with first:
        probe(**inputs())
        with second:
            for _ in range(3):
                probe(**inputs())
            assert entry.counter is None
        probe(**inputs())  # the second one uninstalled: the first alone again
        assert entry.counter is not None
        below = set_launch_observer(lambda kernel, compiled: (seen.append(compiled), below(kernel, compiled))[1])
        try:  # a foreign observer above it (it returns the monitor's counter, which is not kept)
            probe(**inputs())
            probe(**inputs())
            assert entry.counter is None
        finally:
            set_launch_observer(below)
        probe(**inputs())
        probe(**inputs())
        assert entry.counter is not None  # the monitor is the observer again
        with second:  # the second monitor installed, the first taken out below it
            probe(**inputs())
            first.uninstall()
            probe(**inputs())
            probe(**inputs())
            assert entry.counter is not None  # alone in the chain again
    assert (first.counts().launches, second.counts().launches, len(seen)) == (10, 6, 2)
    with first:  # a wrapper of the monitor's observer (functools.wraps copies attributes) that returns its result
        import functools

        inner = zkernel.launch_observer()
        wrapper = functools.wraps(inner)(lambda kernel, compiled: (seen.append(compiled), inner(kernel, compiled))[1])
        set_launch_observer(wrapper)
        try:
            for _ in range(3):
                probe(**inputs())
            assert entry.counter is None
        finally:
            set_launch_observer(inner)
    assert first.counts().launches == 13 and len(seen) == 5
    previous = set_launch_observer(lambda kernel, compiled: seen.append(compiled))
    try:  # a foreign observer below a monitor
        with first:
            probe(**inputs())
            probe(**inputs())
            assert entry.counter is None
    finally:
        set_launch_observer(previous)
    assert first.counts().launches == 15 and len(seen) == 7 and all(c is entry.compiled for c in seen)


def test_only_a_launch_that_may_compile_repairs_a_write_past_the_guard(warmed):
    """A write into ``knobs.runtime.__dict__`` takes the monitor out of Triton's slot; a fast-path
    launch cannot compile and does not look; the next normal-path launch puts it back before Triton runs."""
    _, report = warmed
    try:
        with JitMonitor("error", report=report) as mon:
            knobs.runtime.__dict__["jit_cache_hook"] = None
            probe(**inputs())  # fast
            assert not mon.installed and mon.counts().launches == 1
            probe.fast_path = False
            try:
                probe(**inputs())  # normal: Triton's run may compile, so the chain is repaired first
            finally:
                del probe.fast_path
            assert mon.installed and mon.counts().launches == 2
    finally:
        knobs.runtime.__dict__.pop("jit_cache_hook", None)


# --- opting in and out ------------------------------------------------------------------------------------


def test_fast_path_is_off_by_default_and_env_switch_records_nothing(warmed, monkeypatch):
    class Plain(Probe):
        fast_path = False

    assert Plain().select_variant(**inputs()) is None  # shares Probe's recordings, but not opted in
    assert TritonJitKernel.fast_path is False

    class Fresh(TritonJitKernel):
        kernel = _probe_kernel
        fast_path = True

        @kernel_launcher
        def __call__(self, *, x, y, out, n, stride, period, alpha, flag, w, bias) -> LaunchSpec:
            return LaunchSpec(grid=(1,), kwargs={"BLOCK": 64})

    fresh = Fresh()
    monkeypatch.setenv(FAST_PATH_ENV, "0")
    token = zkernel._WARMUP_SINK.set([])  # a warm-up launch, as compile(key) makes it
    try:
        fresh(**inputs(bias=None))
    finally:
        zkernel._WARMUP_SINK.reset(token)
    assert fresh.fast_variants() == ()
    monkeypatch.setenv(FAST_PATH_ENV, "1")
    token = zkernel._WARMUP_SINK.set([])
    try:
        fresh(**inputs(bias=None))
    finally:
        zkernel._WARMUP_SINK.reset(token)
    assert len(fresh.fast_variants()) == 1
    assert fresh.select_variant(**inputs(n=7, bias=None)) is not None


def test_launch_entry_keeps_the_signature_and_errors():
    import inspect

    sig = inspect.signature(Probe.__call__)
    assert list(sig.parameters)[:4] == ["self", "x", "y", "out"]
    assert sig.parameters["alpha"].default == 1.0
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        probe(**inputs(), nope=1)
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'x'"):
        probe(**{k: v for k, v in inputs().items() if k != "x"})


def test_launchspec_is_still_a_frozen_value():
    import copy
    import dataclasses
    import pickle

    spec = LaunchSpec((1,))
    assert spec.kwargs == {} and spec.returns is None
    assert spec == LaunchSpec(grid=(1,), kwargs={}, returns=None) and spec != LaunchSpec((1,), returns=0)
    assert LaunchSpec((4, 2), {"BLOCK": 64}, "out") == LaunchSpec(grid=(4, 2), kwargs={"BLOCK": 64}, returns="out")
    assert dataclasses.replace(spec, grid=(2,)).grid == (2,)
    assert [f.name for f in dataclasses.fields(LaunchSpec)] == ["grid", "kwargs", "returns"]
    for name in ("grid", "other"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(spec, name, (3,))
    with pytest.raises(dataclasses.FrozenInstanceError):
        del spec.grid
    full = LaunchSpec((4,), {"BLOCK": 64}, [1, 2])
    assert copy.copy(full) == full == pickle.loads(pickle.dumps(full)) and copy.deepcopy(full).returns == [1, 2]
    assert repr(full) == "LaunchSpec(grid=(4,), kwargs={'BLOCK': 64}, returns=[1, 2])"


def test_fast_launches_from_threads_are_all_counted(warmed):
    import threading

    _, report = warmed
    with JitMonitor("error", report=report) as mon:
        threads = [threading.Thread(target=lambda: [probe(**inputs(n=64 * (i + 1))) for i in range(200)])
                   for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert mon.counts().launches == 800 and mon.counts().runtime_compiles == 0


def test_a_launcher_without_inputs(co):
    class Constant(TritonJitKernel):
        kernel = _probe_kernel

        @kernel_launcher
        def __call__(self) -> LaunchSpec:
            t = torch.zeros(64)
            return LaunchSpec(grid=(1,), kwargs=dict(x=t, y=t, out=t, n=64, stride=16, period=17, alpha=0.5,
                                                     flag=True, w=17, bias=None, BLOCK=64), returns=t)

    seen = []
    previous = set_launch_observer(lambda kernel, compiled: seen.append(compiled))
    try:
        assert Constant()() is not None
    finally:
        set_launch_observer(previous)
    assert seen and seen[0] is not None


@pytest.mark.gpu
def test_on_a_gpu_the_fast_path_computes_what_the_normal_path_computes(monkeypatch):
    """Real launches: the fast path takes the CudaLauncher shortcut and writes the same output."""
    monkeypatch.setattr(driver, "_active", driver.default)  # the GPU, not this module's compile-only target
    registry = JitWarmupRegistry()
    with registry.activate():
        probe.register_warmup()
    report = registry.warmup(progress=False)
    assert all(v.loaded for v in report.variants)
    dev = "cuda"
    for over in [{}, dict(x=torch.randn(256 * 48 + 1, device=dev)[1:]), dict(stride=1), dict(num_warps=8),
                 dict(bias=torch.randn(256, device=dev)), dict(flag=True, w=5, mode=0)]:
        inp = dict(x=torch.randn(256 * 48, device=dev), y=torch.randn(64, device=dev), n=250, stride=48,
                   period=33, alpha=3.0, flag=False, w=33)
        inp.update(over)
        outs = []
        for fast in (False, True):
            monkeypatch.setattr(probe, "fast_path", fast)
            outs.append(probe(**inp, out=torch.zeros(256, device=dev)))
            torch.cuda.synchronize()
        assert probe.select_variant(**inp, out=torch.zeros(256, device=dev)) is not None, over
        assert torch.equal(outs[0], outs[1]), over
    entries = [e for table in Probe._launch_state.fast.current[1].values() for e in table.values()
               if e.direct is not None]
    # Triton 3.6: the CudaLauncher shortcut; 3.7 and later call compiled.run
    assert entries and all((e.direct is not False) == (triton_compat.VERSION == (3, 6)) for e in entries)


# --- finding the plan, the device, the method's inputs -----------------------------------------------------


def test_a_call_site_alternating_kwargs_names_gets_each_its_own_plan(warmed, launching, monkeypatch):
    """The entry calls the plan used last; a launch with other ``LaunchSpec.kwargs`` names hands
    over to the plan of its names, on the normal path and on the fast path alike."""
    _, report = warmed
    state = Probe._launch_state
    for fast in (False, True):
        monkeypatch.setattr(probe, "fast_path", fast)
        for over, key in [({}, Probe.CompileKey()), (dict(num_warps=8), Probe.CompileKey(num_warps=8)),
                          (dict(mode=0), Probe.CompileKey()), ({}, Probe.CompileKey())]:
            launching.clear()
            probe(**inputs(**over))
            ((compiled, _),) = launching
            assert compiled is variant_of(report, key).compiled, (fast, over)
            names = ("BLOCK",) + tuple(k.upper() if k == "mode" else k for k in over)
            called = state.fast_call if fast else state.run_call
            assert called is (state.plans[names].fast if fast else state.plans[names].run)


def test_the_device_comes_from_torch_s_c_function_once_cuda_is_initialized(monkeypatch):
    """For Triton's CUDA driver (``get_current_device`` is ``torch.cuda.current_device``) the launch
    path asks ``torch._C._cuda_getDevice`` itself once CUDA is initialized and the process is no bad
    fork; before that, and in a forked child (which forgets the C route at the fork), it asks torch
    (which initializes, or raises torch's bad-fork error)."""
    import os

    from zerojit import _launch

    class Driver:
        get_current_device = staticmethod(torch.cuda.current_device)

    asked = []
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: asked.append("c") or 3, raising=False)
    forked = [False]  # torch's check: a C function that a forked child's at-fork handler makes True
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: forked[0])
    monkeypatch.setattr(_launch, "_last_device_getter", (None, bool))
    drv = Driver()
    monkeypatch.setattr(torch.cuda, "_initialized", False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: asked.append("torch") or 3)
    monkeypatch.setattr(drv, "get_current_device", torch.cuda.current_device)
    assert _launch.current_device(drv) == 3 and asked == ["torch"]  # not initialized: torch's own way
    monkeypatch.setattr(torch.cuda, "_initialized", True)
    asked.clear()
    assert [_launch.current_device(drv) for _ in range(3)] == [3, 3, 3] and asked == ["c", "c", "c"]
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        code = 1
        try:
            forked[0] = True
            asked.clear()
            code = 0 if _launch.current_device(drv) == 3 and asked == ["torch"] else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the forked child did not ask torch"
    asked.clear()
    assert _launch.current_device(drv) == 3 and asked == ["c"]  # the parent keeps its route
    forked[0] = True
    monkeypatch.setattr(_launch, "_last_device_getter", (None, bool))
    assert _launch.current_device(drv) == 3 and asked == ["c", "torch"]  # a bad fork, not yet asked: torch


def test_a_decorated_launcher_method_still_gets_its_inputs_by_name(co):
    """The entry calls the method with its inputs made positional only where its code is the plain
    ``(self, *, inputs...)``; a decorator's ``(*args, **kwargs)`` gets them by name."""
    import functools

    seen = []

    def logged(method):
        @functools.wraps(method)
        def wrapper(*args, **kwargs):
            seen.append(sorted(kwargs))
            return method(*args, **kwargs)
        return wrapper

    class Logged(Probe):
        @kernel_launcher(host_only=("block", "mode", "num_warps"))
        @logged
        def __call__(self, *, x, y, out, n, stride, period, alpha=1.0, flag=False, w=17, bias=None, block=64,
                     mode=None, num_warps=None) -> LaunchSpec:
            return LaunchSpec(grid=((n + block - 1) // block,), kwargs={"BLOCK": block}, returns=out)

    inp = inputs()
    assert Logged()(**inp) is inp["out"]
    assert seen == [sorted(["x", "y", "out", "n", "stride", "period", "alpha", "flag", "w", "bias", "block", "mode",
                            "num_warps"])]
