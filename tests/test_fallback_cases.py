"""The fallback cases of the GPU test (``tests/_fallback_cases.py``), checked with no GPU: under
compile-only (``cuda:90``, dry launches) each case's launch is a miss of a group the warm-up
covered, and the generic variant the warm-up filed for that group is what serves it (nothing
compiles); K3's launch is a plain hit. For the float cases, the compiled layouts say whether the
GPU test may demand bit-equality: equal layouts (the reductions run in the same order) for the
case it demands it of, different ones for the cases it bounds.

The miss is observed through :func:`zerojit.triton_compat.intercept_misses` with a handler that
does what the fallback server's does first (rebuild the miss's classes, find its group's generic
variant, launch it); with :mod:`zerojit.serving` present, the real fallback mode is run too.

In the interpreter session (``TRITON_INTERPRET=1``), the MLA cases' launches (their misaligned
twins included) run on CPU tensors and must equal the references exactly: the GPU test's inputs
and references, checked. (FLA's runtime ``range(0, T)`` and Liger's ``eps.to`` do not run in
Triton 3.6's interpreter.)
"""

from __future__ import annotations

import pytest
import torch

import _fallback_cases as fc
from zerojit import generic
from zerojit import triton_compat as _tc
from zerojit.monitor import specialization_from_compile_info
from zerojit.registry import JitWarmupRegistry

CASES = {fc.case_ids(c): c for c in fc.CASES}


def _warmed(case: fc.Case):
    registry = JitWarmupRegistry()
    with registry.activate():
        case.register()
    report = fc.warm(registry, case)
    assert report.ok, report.failures
    mine = [v for v in report.variants if v.kernel == case.kernel_name]
    assert mine, f"{case.name}: the warm-up compiled no key of {case.kernel_name}"
    keep = generic.keep_one_of(case.jit_fn)
    groups = {generic.group_of(case.jit_fn, v.specialization, v.triton_key, keep) for v in mine}
    return report, {v.specialization for v in mine}, groups


@pytest.mark.parametrize("name", list(CASES))
def test_the_launch_is_a_miss_a_generic_variant_serves(name, module_compile_only_target):
    """The launch in the missing class misses (its classes are no warmed key's), its group is a
    warmed key's group, the generic variant filed for that group serves it, and no variant is
    compiled by the launch (the function's and its generic function's in-process caches do not
    grow). K3: no miss at all."""
    case = CASES[name]
    fc.forget_variants(case.jit_fn)
    _, specs, groups = _warmed(case)
    device = _tc.current_device()
    served = []

    def handler(jit_fn, key, signature, dev, constexprs, options, attrs, warmup):
        spec, group = _miss_group(jit_fn, key, signature, constexprs, attrs)
        found = generic.lookup(jit_fn, dev, group)
        served.append((spec, group, found))
        return found

    caches = [_tc.kernel_cache(case.jit_fn, device)]
    gen = generic.generic_function_of(case.jit_fn, case.keep_one)
    if device in gen.device_caches:
        caches.append(_tc.kernel_cache(gen, device))
    before = [len(c) for c in caches]
    _tc.intercept_misses(case.jit_fn, handler)
    try:
        case.launch(case.make("cpu"))
    finally:
        _tc.release_misses(case.jit_fn)
    assert [len(c) for c in caches] == before, f"{name}: the launch compiled a variant"
    if not case.misses:
        assert served == [], f"{name}: expected a plain hit, got a miss of {served[0][0]}"
        return
    assert len(served) == 1, f"{name}: {len(served)} misses"
    spec, group, found = served[0]
    assert spec not in specs, f"{name}: the launch's classes are a warmed key's: the case tests no fallback"
    assert group in groups, f"{name}: the miss's group is no warmed key's group"
    assert found is not None, f"{name}: no generic variant filed for the miss's group"
    assert {c.attr for c in group.classes if c.kind == "pointer"} <= {None}  # the generic's pointers: no alignment


def test_every_kernel_of_the_issue_has_a_case():
    """The seven MLA kernels, one FLA and one Liger kernel (issue 29, "Correctness")."""
    names = [c.name for c in fc.CASES]
    assert names[:7] == [f"K{i}" for i in range(1, 8)]
    assert any(n.startswith("FLA ") for n in names) and any(n.startswith("Liger ") for n in names)
    assert {c.compare for c in fc.CASES[:7]} == {"exact"}


def _miss_group(jit_fn, key, signature, constexprs, attrs):
    spec = specialization_from_compile_info(jit_fn, signature, constexprs, attrs)
    return spec, generic.group_of(jit_fn, spec, key, generic.keep_one_of(jit_fn))


def _variants(case: fc.Case):
    """The specialized variant of the missing class (Triton compiles it: the handler serves
    nothing) and the generic variant filed for its group."""
    _warmed(case)
    device = _tc.current_device()
    groups = []

    def handler(jit_fn, key, signature, dev, constexprs, options, attrs, warmup):
        groups.append((key, _miss_group(jit_fn, key, signature, constexprs, attrs)[1]))

    _tc.intercept_misses(case.jit_fn, handler)
    try:
        case.launch(case.make("cpu"))
    finally:
        _tc.release_misses(case.jit_fn)
    [(key, group)] = groups
    return _tc.kernel_cache(case.jit_fn, device)[key], generic.lookup(case.jit_fn, device, group)


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.compare != "exact"])
def test_float_cases_layouts_decide_bit_equality(name, module_compile_only_target):
    """A float kernel's generic variant is bit-equal to the specialized variant of the launch's
    class where both compile to the same layouts (every reduction in the same order): the FLA case
    without a state. With an aligned state (FLA) or an aligned weight and a 4-wide row layout
    (Liger RMSNorm) the specialized variant's layouts differ: the GPU test bounds those."""
    case = CASES[name]
    fc.forget_variants(case.jit_fn)
    specialized, generic_variant = _variants(case)
    same = fc.layouts(specialized) == fc.layouts(generic_variant)
    assert same == (case.compare == "bit"), (fc.layouts(specialized), fc.layouts(generic_variant))


@pytest.mark.parametrize("name", list(CASES))
def test_fallback_mode_end_to_end_compile_only(name, module_compile_only_target):
    """With the serving layer: JitMonitor("fallback") serves the dry launch with the generic
    variant (0 request-path compiles, >= 1 fallback launch); the background compile finishes and
    ``between_requests()`` swaps the specialized variant in; the next launch takes it (no new
    fallback launch). K3: a plain hit, nothing to serve or swap."""
    serving = pytest.importorskip("zerojit.serving")
    from zerojit.monitor import JitMonitor

    case = CASES[name]
    fc.forget_variants(case.jit_fn)
    report, _, _ = _warmed(case)
    inputs = case.make("cpu")
    options = serving.FallbackOptions(swap="between-requests")
    with JitMonitor("fallback", fallback=options, report=report) as mon:
        case.launch(inputs)
        first = mon.counts()
        if not case.misses:
            assert (first.request_path_compiles, first.fallback_launches) == (0, 0), first
            return
        assert (first.request_path_compiles, first.fallback_launches >= 1) == (0, True), first
        assert serving.wait_idle(300)
        serving.between_requests()
        case.launch(inputs)
        after = mon.counts()
    assert after.swaps >= 1, after
    assert after.fallback_launches == first.fallback_launches and after.request_path_compiles == 0, after


@pytest.mark.interpreter
@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.compare == "exact"])
def test_mla_case_launch_equals_reference_interpreted(name):
    case = CASES[name]
    inputs = case.make("cpu")
    want = fc.outputs_of(case.reference(inputs))
    got = fc.snapshot(case.launch(inputs))
    assert len(got) == len(want) >= 1
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape and torch.equal(g, w), name
