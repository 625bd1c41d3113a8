"""Fallback launches are correct (issue 29, "Correctness"): on a GPU, for each case of
``tests/_fallback_cases.py`` (the seven sparse-MLA kernels, FLA's fused recurrent forward,
Liger's RMSNorm forward), a key space warmed without one value class, generic variants on, and
a launch in that class under ``JitMonitor("fallback")``:

* it compiles nothing on the request path (``request_path_compiles == 0``) and is served by the
  generic variant (``fallback_launches >= 1``);
* its outputs equal the PyTorch reference (exactly for the integer MLA kernels, within a float
  tolerance for FLA and Liger, whose fp32 sums no PyTorch reference reproduces bit for bit);
* after the background compile (``wait_idle``) and ``between_requests()`` (``swaps >= 1``), the
  same launch runs the specialized variant (no new fallback launch) and its outputs equal the
  fallback launch's: exactly (MLA), bit for bit (FLA without a state), or within the bound each
  case documents where the two variants reduce in another order (FLA with an aligned state:
  :func:`_fallback_cases.fla_bound`; Liger RMSNorm at an odd hidden size:
  :func:`_fallback_cases.rmsnorm_bound`). Each such case prints what it measured
  (``FALLBACK-FIGURES``; run pytest with ``-s`` to see them). Measured on the H200 (2026-12-05,
  Triton 3.6.0): the seven MLA kernels and FLA without a state bit-equal; FLA with an aligned
  state, ``o`` at most 3.8e-6 apart (1.1% of the bound; the final state bit-equal): the
  specialized variant loads the state 4-wide, the generic 1-wide, so the fp32 products are
  summed in another order; Liger RMSNorm at hidden 4095, ``Y`` at most 4 ulp (3.4e-7 relative)
  and ``RSTD`` 2 ulp apart, for the same reason (its row sums).

K3 specializes no argument on its value: its launch in an "other" class must be a plain hit.

One more test: a launch that misses while a CUDA graph is being captured is served by the
generic variant, the swap waits for the capture's end, and the captured graph keeps launching
the generic variant after the swap (its replay equals the reference and a direct launch of the
generic variant, bit for bit).
"""

from __future__ import annotations

import json

import pytest
import torch

import _fallback_cases as fc

CASES = {fc.case_ids(c): c for c in fc.CASES}
WAIT_S = 180.0  # the background compile: a spawned worker's start-up plus one compile


def _serving():
    import zerojit.serving as serving

    return serving


def _monitor(report):
    from zerojit.monitor import JitMonitor

    serving = _serving()
    return JitMonitor("fallback", fallback=serving.FallbackOptions(swap="between-requests"), report=report)


def _warmed(case: fc.Case):
    from zerojit.registry import JitWarmupRegistry

    fc.forget_variants(case.jit_fn)  # a class an earlier test launched must miss again
    registry = JitWarmupRegistry()
    with registry.activate():
        case.register()
    report = fc.warm(registry, case)
    assert report.ok, report.failures
    return report


def _assert_reference(case: fc.Case, got: list[torch.Tensor], want: list[torch.Tensor], what: str) -> None:
    assert len(got) == len(want), f"{case.name} ({what}): {len(got)} outputs, reference {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (case.name, what, i, g.dtype, g.shape, w.dtype, w.shape)
        if case.compare == "exact":
            assert torch.equal(g, w), f"{case.name} ({what}): output {i} differs from the reference"
        else:
            torch.testing.assert_close(g, w, **case.tolerance, msg=lambda m: f"{case.name} ({what}) output {i}: {m}")


def _assert_same(case: fc.Case, fallback: list[torch.Tensor], specialized: list[torch.Tensor], inputs: dict) -> dict:
    if case.compare in ("exact", "bit"):
        for i, (f, s) in enumerate(zip(fallback, specialized)):
            assert torch.equal(f, s), f"{case.name}: output {i} of the fallback launch differs from the specialized's"
        return {"equal": True}
    return case.compare(fallback, specialized, inputs)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(CASES))
def test_fallback_launch_equals_reference_and_specialized_variant(name):
    case = CASES[name]
    report = _warmed(case)
    inputs = case.make("cuda")
    want = fc.outputs_of(case.reference(inputs))
    serving = _serving()
    with _monitor(report) as mon:
        got = fc.snapshot(case.launch(inputs))
        torch.cuda.synchronize()
        first = mon.counts()
        if not case.misses:  # K3: nothing to fall back from
            assert (first.request_path_compiles, first.fallback_launches) == (0, 0), first
            _assert_reference(case, got, want, "hit")
            return
        assert first.request_path_compiles == 0 and first.fallback_launches >= 1, first
        assert serving.wait_idle(WAIT_S), f"{case.name}: the background compile did not finish in {WAIT_S:.0f} s"
        assert mon.counts().swaps == 0  # "between-requests": nothing swapped before the boundary
        serving.between_requests()
        again = fc.snapshot(case.launch(inputs))
        torch.cuda.synchronize()
        after = mon.counts()
    assert after.swaps >= 1, after
    assert after.fallback_launches == first.fallback_launches, f"{case.name}: the swapped key still falls back"
    assert after.request_path_compiles == 0, after
    _assert_reference(case, got, want, "fallback launch")
    _assert_reference(case, again, want, "specialized variant")
    figures = _assert_same(case, got, again, inputs)
    print(f"FALLBACK-FIGURES {case.name}: {json.dumps(figures)}")


@pytest.mark.gpu
def test_graph_captured_with_the_generic_variant_keeps_it_after_the_swap():
    """Liger RMSNorm at hidden 4095 (warmed at 4096): the miss happens inside a CUDA-graph capture
    and is served by the generic variant (already loaded by the warm-up: no module load in the
    capture); the background compile finishes during the capture, but ``between_requests()``
    there swaps nothing (a load would break the capture); after the capture it swaps. The graph
    still launches the generic variant: its replay equals the reference and, bit for bit, a
    direct launch of the generic function; an eager launch now runs the specialized variant."""
    from zerojit import generic

    case = CASES["Liger-rms_norm"]
    report = _warmed(case)
    serving = _serving()
    inputs = case.make("cuda")
    want = fc.outputs_of(case.reference(inputs))
    X = torch.randn(64, 4096, device="cuda")  # a warmed class: the launcher's state is built before the capture
    warmed = dict(inputs, X=X, Y=torch.empty_like(X), W=torch.ones(4096, device="cuda"))
    graph = torch.cuda.CUDAGraph()
    with _monitor(report) as mon:
        case.launch(warmed)
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            case.launch(inputs)
            assert serving.wait_idle(WAIT_S)
            serving.between_requests()
            during = mon.counts()
        assert during.fallback_launches >= 1 and during.request_path_compiles == 0, during
        assert during.swaps == 0, "a swap (a module load) happened during the capture"
        serving.between_requests()
        assert mon.counts().swaps >= 1
        for t in (inputs["Y"], inputs["RSTD"]):
            t.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        replayed = fc.snapshot((inputs["Y"], inputs["RSTD"]))
        eager = fc.snapshot(case.launch(inputs))
        torch.cuda.synchronize()
        after = mon.counts()
    assert after.fallback_launches == during.fallback_launches  # the eager launch: the specialized variant
    _assert_reference(case, replayed, want, "graph replay")
    grid, named, returns = fc.launch_arguments(case.kernel, inputs)
    generic.generic_function_of(case.jit_fn)[grid](**named)
    torch.cuda.synchronize()
    direct = fc.snapshot(returns)
    assert all(torch.equal(r, d) for r, d in zip(replayed, direct)), "the replay did not run the generic variant"
    print(f"FALLBACK-FIGURES graph replay vs specialized: {json.dumps(fc.rmsnorm_bound(replayed, eager, inputs))}")
