"""``zerojit manifest widen`` / ``merge``, the shape-flow rule, configuration vs growth, and a
recorded kernel's constexpr miss (issue 30, section 3). Compile-only (cuda:90).

References are independent of widen: the expected sets are built by hand from the recorded
specializations, and each int class from Triton's own binder on every value of the axis.
"""

from __future__ import annotations

import json
import sys

import pytest
from _cli import fresh_module, run_zerojit as _zerojit
import torch
import triton

from zerojit import JitMonitor, JitWarmupRegistry, RuntimeJitError
from zerojit.compile_only import compile_only
from zerojit.generalisation import growth, growth_report, settings
from zerojit.manifest import read_manifest, write_manifest
from zerojit.merging import merge_manifests
from zerojit.recording import Recorder
from zerojit.shapeflow import shape_parameters
from zerojit.triton_compat import bind, param_specialization
from zerojit.widen import WidenError, widen


KERNELS = '''
import triton
import triton.language as tl


@triton.jit
def _tile(x, N: tl.constexpr):
    return tl.reshape(x, (N, 1))


@triton.jit(do_not_specialize=["T"])
def recurrent_kernel(x_ptr, out_ptr, n, T, B: tl.constexpr, H: tl.constexpr, BK: tl.constexpr, NP2: tl.constexpr,
                     SCALE: tl.constexpr, USE_G: tl.constexpr):
    o_k = tl.arange(0, BK)
    W: tl.constexpr = NP2 * 2
    acc = tl.zeros([W], dtype=tl.float32)
    v = tl.load(x_ptr + o_k, mask=o_k < n) * SCALE
    if USE_G:
        v = v * 2
    t = _tile(v, BK)
    tl.store(out_ptr + tl.program_id(0) * BK + o_k + B * H * 0, v + tl.sum(acc, axis=0), mask=o_k < n)
'''

APP = '''
import sys
import torch
from {module} import recurrent_kernel
H = int(sys.argv[1])
for B in [int(b) for b in sys.argv[2].split(",")]:
    x, out = torch.zeros(64), torch.zeros(64)
    recurrent_kernel[(B,)](x, out, 64, 4, B=B, H=H, BK=16, NP2=16, SCALE=2, USE_G=False)
print("ran")
'''


@pytest.fixture
def kernels(tmp_path, monkeypatch):
    """A fresh module holding the test kernels (importable by name, as a program's are)."""
    module = fresh_module(KERNELS, "zj_widen", tmp_path, monkeypatch)
    yield module
    sys.modules.pop(module.__name__, None)


def _launch(fn, H, Bs, n=64, use_g=False):
    x, out = torch.zeros(64), torch.zeros(64)
    for B in Bs:
        fn[(1,)](x, out, n, 4, B=B, H=H, BK=16, NP2=16, SCALE=2, USE_G=use_g)


def _record(fn, H, Bs, **kw):
    recorder = Recorder().install()
    try:
        _launch(fn, H, Bs, **kw)
    finally:
        recorder.uninstall()
    return recorder.manifest(["python", "app.py", str(H)])


def _keys(record):
    return {(s.specialization, s.options) for s in record.specializations}


def _with(spec, index, entry):
    return tuple(entry if i == index else e for i, e in enumerate(spec))


# ---------------------------------------------------------------------------------------------
# widen's set semantics
# ---------------------------------------------------------------------------------------------


def test_a_constexpr_axis_gives_every_value_for_every_recorded_specialization(kernels, compile_only_target):
    manifest = _record(kernels.recurrent_kernel, 4, [1, 2])
    manifest = merge_manifests([("a", manifest), ("b", _record(kernels.recurrent_kernel, 4, [2], n=100))])
    [record] = manifest.kernels
    b = record.parameters.index("B")
    wide = widen(manifest, ["recurrent_kernel:B=1..5"])
    [out] = wide.kernels
    expected = {(_with(s.specialization, b, ("constexpr", v)), s.options) for s in record.specializations
                for v in range(1, 6)} | _keys(record)
    assert _keys(out) == expected and len(out.specializations) == len(expected) == 10  # 2 n classes x 5 B
    assert out.specializations[:3] == record.specializations  # the recorded ones kept, first
    new = out.specializations[3:]
    assert all(s.launches == 0 and s.runs == () for s in new)
    assert {dict(s.values)["n"] for s in new} == {16, 17}  # the base's representative kept
    assert widen(wide, ["recurrent_kernel:B=1..5"]) == wide  # nothing new: deduplicated


def test_an_int_axis_gives_each_triton_class_the_values_fall_in(kernels, compile_only_target):
    fn = kernels.recurrent_kernel
    manifest = _record(fn, 4, [1])
    [record] = manifest.kernels
    i = record.parameters.index("n")
    x = torch.zeros(64)
    wide = widen(manifest, ["recurrent_kernel:n=1..40,3000000001"])
    # Triton's own binder on every value of the axis: the classes it puts them in
    classes = {tuple(param_specialization(fn, bind(fn, x, x, v, 4, B=1, H=4, BK=16, NP2=16, SCALE=2,
                                                       USE_G=False)[1])[i]) for v in [*range(1, 41), 3000000001]}
    assert classes == {("constexpr", 1), ("i32", "D"), ("i32", ""), ("i64", "")}
    [base] = record.specializations
    assert _keys(wide.kernels[0]) == {(_with(base.specialization, i, c), ()) for c in classes}
    reps = {s.specialization[i]: dict(s.values).get("n") for s in wide.kernels[0].specializations}
    assert reps == {("constexpr", 1): None, ("i32", "D"): 16, ("i32", ""): 17, ("i64", ""): 2**32 + 1}
    # T is do_not_specialize: only its width is a class, and the recorded one is i32
    assert widen(manifest, ["recurrent_kernel:T=1..1000"]) == manifest


def test_axes_of_one_kernel_multiply(kernels, compile_only_target):
    manifest = _record(kernels.recurrent_kernel, 4, [1])
    [record] = manifest.kernels
    [base] = record.specializations
    b, g, n = (record.parameters.index(p) for p in ("B", "USE_G", "n"))
    wide = widen(manifest, ["recurrent_kernel:B=1,2,8", "recurrent_kernel:USE_G=true,false",
                            "recurrent_kernel:n=16,17"])
    expected = {(_with(_with(_with(base.specialization, b, ("constexpr", vb)), g, ("constexpr", vg)), n, cn), ())
                for vb in (1, 2, 8) for vg in (True, False) for cn in (("i32", "D"), ("i32", ""))}
    assert _keys(wide.kernels[0]) == expected | _keys(record) and len(expected) == 12


def test_a_kernel_over_the_key_budget_is_refused_naming_the_size(kernels, compile_only_target):
    fn = kernels.recurrent_kernel
    manifest = merge_manifests([("a", _record(fn, 4, [1, 2])), ("b", _record(fn, 4, [2], n=100))])
    with pytest.raises(WidenError, match=r"gives 5000 values, above the key budget of 4096"):
        widen(manifest, ["recurrent_kernel:B=1..5000"])
    with pytest.raises(WidenError, match=r"gives more than 10 specializations \(3 recorded\), above the key budget"):
        widen(manifest, ["recurrent_kernel:B=1..8"], budget=10)  # 2 classes of n x 8 values of B = 16
    assert len(widen(manifest, ["recurrent_kernel:B=1..8"], budget=16).kernels[0].specializations) == 16


def test_an_int_axis_outside_tritons_int_range_is_refused_not_dropped(kernels, compile_only_target):
    manifest = _record(kernels.recurrent_kernel, 4, [1, 2])
    for axis in ("recurrent_kernel:n=-9223372036854775809",  # a value: was an OverflowError traceback (exit 1)
                 "recurrent_kernel:n=18446744073709551616..18446744073709551700",  # was 0 new variants, silently
                 "recurrent_kernel:n=1,18446744073709551615..18446744073709551616"):  # was its end dropped
        with pytest.raises(WidenError, match=r"not within the ints a Triton kernel takes, \[-2\*\*63, 2\*\*64\)"):
            widen(manifest, [axis])
    with pytest.raises(WidenError, match="not within"):  # with another axis: was that axis's variants dropped too
        widen(manifest, ["recurrent_kernel:B=1..3", "recurrent_kernel:n=18446744073709551616"])
    assert widen(manifest, ["recurrent_kernel:n=-9223372036854775808..18446744073709551615"])  # the ends themselves


def test_the_command_refuses_an_unknown_kernel_or_parameter_in_one_line(kernels, compile_only_target, tmp_path,
                                                                        monkeypatch):
    from typer.testing import CliRunner

    from zerojit.cli import app

    manifest = _record(kernels.recurrent_kernel, 4, [1, 2])
    write_manifest(manifest, tmp_path / "m.json")
    monkeypatch.chdir(tmp_path)

    def run(axis):
        return CliRunner().invoke(app, ["manifest", "widen", "m.json", "--axis", axis, "-o", "w.json"])

    for axis, words in [("nope:B=1..4", f"holds no kernel 'nope'; it holds {kernels.__name__}.recurrent_kernel"),
                        ("recurrent_kernel:Q=1..4", "has no parameter 'Q'; its parameters: x_ptr, out_ptr, n, T, B,"),
                        ("recurrent_kernel:x_ptr=1", "'x_ptr' is no int"),
                        ("recurrent_kernel:B", "is not KERNEL:PARAM=VALUES"),
                        ("recurrent_kernel:B=5..1", "range '5..1' is empty (A..B needs A <= B)")]:
        done = run(axis)
        assert done.exit_code == 2, done.output
        assert words in done.output and "Traceback" not in done.output and len(done.output.splitlines()) == 1
        assert not (tmp_path / "w.json").exists()
    done = run("recurrent_kernel:B=1..4")
    assert done.exit_code == 0, done.output
    assert "wrote w.json: 2 new variants" in done.output and "estimated compile time:" in done.output
    assert len(read_manifest(tmp_path / "w.json").kernels[0].specializations) == 4
    # -o -: the manifest alone on stdout, the summary on stderr, naming no file
    done = CliRunner().invoke(app, ["manifest", "widen", "m.json", "--axis", "recurrent_kernel:B=1..4", "-o", "-"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout) == read_manifest(tmp_path / "w.json").to_dict()
    assert done.stderr.startswith(f"wrote the widened manifest to stdout: 2 new variants of {kernels.__name__}.")


def test_merge_refuses_one_file_given_twice_by_any_path(kernels, compile_only_target, tmp_path, monkeypatch):
    """Was merged: 2 runs, every launch count doubled, no warning."""
    from typer.testing import CliRunner

    from zerojit.cli import app

    fn = kernels.recurrent_kernel
    write_manifest(_record(fn, 4, [1, 2]), tmp_path / "a.json")
    write_manifest(_record(fn, 8, [1]), tmp_path / "b.json")
    (tmp_path / "link.json").symlink_to("a.json")
    monkeypatch.chdir(tmp_path)
    why = ": merging a recording with itself would count its runs and launches twice"
    for given, words in [(["a.json", "b.json", "a.json"], "manifest 'a.json' is given twice"),
                         (["a.json", "./a.json"], "manifests 'a.json' and './a.json' are the same file"),
                         (["b.json", "link.json", str(tmp_path / "a.json")],
                          f"manifests 'link.json' and '{tmp_path / 'a.json'}' are the same file")]:
        done = CliRunner().invoke(app, ["manifest", "merge", *given, "-o", "m.json"])
        assert done.exit_code == 2, done.output
        assert done.output == f"zerojit manifest merge: {words}{why}\n"
        assert not (tmp_path / "m.json").exists()
    done = CliRunner().invoke(app, ["manifest", "merge", "a.json", "b.json", "-o", "m.json"])
    assert done.exit_code == 0 and "wrote m.json: 2 runs" in done.output, done.output


def test_widen_warns_of_shape_values_not_powers_of_two_and_of_tuned_constexprs(kernels, compile_only_target,
                                                                              tmp_path, monkeypatch):
    import dataclasses

    from typer.testing import CliRunner

    from zerojit.cli import app
    from zerojit.widen import widen_warnings

    manifest = _record(kernels.recurrent_kernel, 4, [1])
    name = f"{kernels.__name__}.recurrent_kernel"
    assert manifest.kernels[0].shape_constexprs == ("BK", "NP2")  # BK: tl.arange(0, BK)
    assert widen_warnings(manifest, ["recurrent_kernel:BK=16..18", "recurrent_kernel:B=3..5"]) == [
        f"{name}'s constexpr 'BK' sets a shape or a static loop bound, and 17, 18 are not powers of two: a tl.arange "
        "bound or a block shape needs a power of two (those variants will fail to compile), a tl.static_range bound "
        "takes any int"]
    assert widen_warnings(manifest, ["recurrent_kernel:BK=16,32,64", "recurrent_kernel:NP2=1..4"])[0].startswith(
        f"{name}'s constexpr 'NP2' sets a shape or a static loop bound, and 3 is not a power of two:")
    # an autotuned kernel's config sets BK: a widened value is one no config launches
    [record] = manifest.kernels
    tuned = dataclasses.replace(record, specializations=tuple(
        dataclasses.replace(s, autotune_config=(("BK", 16),)) for s in record.specializations))
    assert widen_warnings(dataclasses.replace(manifest, kernels=(tuned,)), ["recurrent_kernel:BK=16,32"]) == [
        f"{name}'s constexpr 'BK' is set by its triton.autotune configs: widening it adds variants no config launches"]
    # the command prints them and still writes the manifest (a static_range bound takes any int)
    write_manifest(manifest, tmp_path / "m.json")
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(app, ["manifest", "widen", "m.json", "--axis", "recurrent_kernel:BK=16..18", "-o",
                                    "w.json"])
    assert done.exit_code == 0, done.output
    assert f"zerojit manifest widen: warning: {name}'s constexpr 'BK' sets a shape" in done.output
    assert len(read_manifest(tmp_path / "w.json").kernels[0].specializations) == 3


# ---------------------------------------------------------------------------------------------
# The report: shapes, bools, configuration vs growth
# ---------------------------------------------------------------------------------------------


def test_a_constexpr_that_sets_a_shape_is_never_offered_as_a_runtime_int(kernels):
    # tl.arange(0, BK), tl.zeros([NP2 * 2]) through a local, and BK into _tile's reshape; SCALE,
    # B and H only in arithmetic
    assert shape_parameters(kernels.recurrent_kernel) == {"BK", "NP2"}
    assert shape_parameters(kernels._tile) == {"N"}


def test_the_report_offers_widen_for_each_growing_constexpr_and_a_runtime_int_only_off_shapes(
        kernels, compile_only_target):
    fn = kernels.recurrent_kernel
    recorder = Recorder().install()
    try:
        x, out = torch.zeros(64), torch.zeros(64)
        for bk, b, g in [(16, 1, False), (32, 2, True), (16, 3, False), (16, 64, False)]:
            fn[(1,)](x, out, 64, 4, B=b, H=4, BK=bk, NP2=16, SCALE=2, USE_G=g)
    finally:
        recorder.uninstall()
    manifest = recorder.manifest(["python", "app.py"])
    found = {g.parameter: g for g in growth(manifest, "m.json")}
    assert set(found) == {"B", "BK", "USE_G"}
    assert found["B"].widen == "zerojit manifest widen m.json --axis recurrent_kernel:B=1..64 -o m-widened.json"
    # two distinct rests (BK 16 / USE_G False, BK 32 / USE_G True) x 64 values of B, less the 4 recorded
    assert found["B"].widen_adds == 2 * 64 - 4 and found["B"].shape is False
    assert "do_not_specialize=['B']" in found["B"].fix
    assert found["BK"].fix is None and found["BK"].shape is True
    assert found["BK"].widen.endswith("--axis recurrent_kernel:BK=16,32 -o m-widened.json")
    assert (found["USE_G"].kind, found["USE_G"].values) == ("bool", ("False", "True"))
    assert "recurrent_kernel:USE_G=true,false" in found["USE_G"].widen
    text = growth_report(manifest, "m.json")
    [bk_line] = [line for line in text.splitlines() if "'BK'" in line]
    assert "do_not_specialize" not in bk_line
    assert bk_line.endswith("(adds 4 variants); it sets a shape or a static loop bound, so it stays a constexpr")


def test_the_widen_command_quotes_each_argument_a_shell_would_split(kernels, compile_only_target):
    """A path with a space or a shell metacharacter (was printed bare: `widen sp ace2.json ...`)."""
    import shlex

    from zerojit.widen import widen_command, widened_path

    axes = ["recurrent_kernel:B=1..64", "mod.make.<locals>.k:USE_G=true,false"]
    for path in ["sp ace2.json", "it's;$(rm -rf x)&.json", "runs/m.json"]:
        assert shlex.split(widen_command(path, axes)) == [
            "zerojit", "manifest", "widen", path, "--axis", axes[0], "--axis", axes[1], "-o", widened_path(path)]
    assert widen_command("m.json", axes[:1]) == ("zerojit manifest widen m.json --axis recurrent_kernel:B=1..64 "
                                                 "-o m-widened.json")  # nothing to quote: as before
    # the report's command too
    manifest = _record(kernels.recurrent_kernel, 4, [1, 2])
    [found] = [g for g in growth(manifest, "sp ace2.json") if g.parameter == "B"]
    assert shlex.split(found.widen) == ["zerojit", "manifest", "widen", "sp ace2.json", "--axis",
                                        "recurrent_kernel:B=1..2", "-o", "sp ace2-widened.json"]


def test_the_report_offers_no_bound_that_saves_nothing_and_counts_one_variant_in_the_singular(
        kernels, compile_only_target):
    fn = kernels.recurrent_kernel
    x, out = torch.zeros(64), torch.zeros(64)

    def record(calls):
        recorder = Recorder().install()
        try:
            for n, b in calls:
                fn[(1,)](x, out, n, 4, B=b, H=4, BK=16, NP2=16, SCALE=2, USE_G=False)
        finally:
            recorder.uninstall()
        return recorder.manifest(["python", "app.py"])

    # n (divisible by 16, then not) varies only with B: bounding either alone leaves 2 variants
    text = growth_report(record([(64, 1), (100, 2)]), "m.json")
    lines = text.splitlines()
    name = f"{kernels.__name__}.recurrent_kernel"
    assert lines[0] == ("generalisation: 2 parameter(s) make the key space grow with the workload (1 not listed: "
                        "bounding it alone saves nothing):")
    assert lines[1] == (f"  {name}: constexpr parameter 'B' took 2 values (1, 2): warm every value with `zerojit "
                        "manifest widen m.json --axis recurrent_kernel:B=1..2 -o m-widened.json` (adds 2 variants)")
    assert lines[2] == f"  {name}: 'n', 'B' bounded together: 2 -> 1 variants (saves 1)"
    assert "saves 0" not in text and "'n' took" not in text and len(lines) == 3
    # B = 1, 2, 4 widened to 1..4 adds the 3 alone
    [b_line] = [line for line in growth_report(record([(64, 1), (64, 2), (64, 4)]), "m.json").splitlines()
                if "'B'" in line]
    assert "(adds 1 variant); or, if it follows the request" in b_line and b_line.endswith("3 -> 1 variants (saves 2)")


def test_a_value_constant_within_each_run_is_configuration_not_growth(kernels, compile_only_target):
    fn = kernels.recurrent_kernel
    merged = merge_manifests([("h4.json", _record(fn, 4, [1, 2])), ("h8.json", _record(fn, 8, [1, 2, 3]))])
    assert [r.command for r in merged.runs] == [("python", "app.py", "4"), ("python", "app.py", "8")]
    [record] = merged.kernels
    runs = {dict(zip(record.parameters, s.specialization))["B"][1]: s.runs for s in record.specializations
            if dict(zip(record.parameters, s.specialization))["H"][1] == 4}
    assert runs == {1: (0,), 2: (0,)}
    [setting] = settings(merged)
    assert (setting.parameter, setting.per_run) == ("H", ((0, "4"), (1, "8")))
    assert [g.parameter for g in growth(merged)] == ["B"]  # varies within each run
    text = growth_report(merged, "m.json")
    assert "'H' set per run (4 in run 0, 8 in run 1): a model setting, not growth" in text
    assert "run 1: python app.py 8" in text
    # one recording alone: H never varied, B did
    assert [g.parameter for g in growth(_record(fn, 4, [1, 2]))] == ["B"]


def test_a_merged_manifest_round_trips_its_runs(kernels, compile_only_target, tmp_path):
    fn = kernels.recurrent_kernel
    merged = merge_manifests([("a", _record(fn, 4, [1])), ("b", _record(fn, 4, [1, 2]))])
    write_manifest(merged, tmp_path / "m.json")
    back = read_manifest(tmp_path / "m.json")
    assert back.to_dict() == merged.to_dict()
    [record] = back.kernels
    assert [(s.launches, s.runs) for s in record.specializations] == [(2, (0, 1)), (1, (1,))]
    assert record.shape_constexprs == ("BK", "NP2")


# ---------------------------------------------------------------------------------------------
# A recorded kernel's constexpr miss
# ---------------------------------------------------------------------------------------------


def test_a_constexpr_miss_leads_with_what_differs_and_its_widen_command(kernels, compile_only_target, tmp_path):
    fn = kernels.recurrent_kernel
    path = tmp_path / "m.json"
    write_manifest(_record(fn, 4, [1, 2]), path)
    with compile_only("cuda:90"):
        report = JitWarmupRegistry().warmup(manifest=path, progress=False, generic=False)
        with JitMonitor("error", report=report), pytest.raises(RuntimeJitError) as raised:
            _launch(fn, 4, [5])
    lines = str(raised.value).splitlines()
    name = f"{kernels.__name__}.recurrent_kernel"
    assert lines[1:4] == [
        "  differs from the nearest warmed variant in 1 argument:",
        "    B: warmed as constexpr 2, called as constexpr 5",  # the nearest value of the two warmed
        f"  warm it: zerojit manifest widen {path} --axis {name}:B=1..8 -o {tmp_path / 'm-widened.json'}, then exec "
        "with the widened manifest (or record the program again with this workload: zerojit record)"]
    assert lines[4].startswith("  nearest warmed variant: warm-up #2 of 2 for this kernel; the other 9 arguments")
    assert len(lines) == 6 and not any(line.lstrip().startswith(("H:", "SCALE:")) for line in lines)


def test_a_shape_constexpr_miss_is_widened_over_powers_of_two_and_the_other_differences_named(
        kernels, compile_only_target, tmp_path):
    """BK sets tl.arange's bound: 16 warmed, 64 called -> 16,32,64 (1..64 would not compile); n
    (64 warmed: divisible by 16; 100 called: not) is no constexpr, so the widen cannot warm it."""
    fn = kernels.recurrent_kernel
    path = tmp_path / "m.json"
    write_manifest(_record(fn, 4, [1]), path)
    x, out = torch.zeros(64), torch.zeros(64)
    with compile_only("cuda:90"):
        report = JitWarmupRegistry().warmup(manifest=path, progress=False, generic=False)
        with JitMonitor("error", report=report), pytest.raises(RuntimeJitError) as raised:
            fn[(1,)](x, out, 100, 4, B=1, H=4, BK=64, NP2=16, SCALE=2, USE_G=False)
    lines = str(raised.value).splitlines()
    name = f"{kernels.__name__}.recurrent_kernel"
    assert lines[1] == "  differs from the nearest warmed variant in 2 arguments:"
    assert lines[4].startswith(f"  warm it: zerojit manifest widen {path} --axis {name}:BK=16,32,64 -o "), lines[4]
    assert lines[5] == ("  (that warms the constexprs only: n differs too, and the call still misses after it; "
                        "recording this workload warms them all)")
    summary = raised.value.compile.summary()  # the warn-mode log line says it too
    assert summary.endswith(f"--axis {name}:BK=16,32,64 -o {tmp_path / 'm-widened.json'} (the constexprs only: n "
                            "differs too)"), summary


def test_a_miss_far_from_the_warmed_value_is_widened_over_the_two_values_not_a_range_of_thousands(
        kernels, compile_only_target, tmp_path):
    """B warmed at 100, called at 200: 1..256 would be 256 variants for one miss (a hidden size of
    4090 against 4096: 4096, past widen's key budget), so the hint lists the two values."""
    fn = kernels.recurrent_kernel
    path = tmp_path / "m.json"
    write_manifest(_record(fn, 4, [100]), path)
    with compile_only("cuda:90"):
        report = JitWarmupRegistry().warmup(manifest=path, progress=False, generic=False)
        with JitMonitor("error", report=report), pytest.raises(RuntimeJitError) as raised:
            _launch(fn, 4, [200])
    name = f"{kernels.__name__}.recurrent_kernel"
    assert f"  warm it: zerojit manifest widen {path} --axis {name}:B=100,200 -o " in str(raised.value), raised.value


# ---------------------------------------------------------------------------------------------
# End to end: a few batch sizes recorded, the rest from widen, 0 runtime compiles
# ---------------------------------------------------------------------------------------------




def test_batch_sizes_recorded_few_widened_to_all_run_with_zero_runtime_compiles(kernels, tmp_path):
    """A B constexpr as vLLM's copy of FLA's fused recurrent has; 1..16 (not 1..64) keeps CI short."""
    (tmp_path / "app.py").write_text(APP.format(module=kernels.__name__))
    (tmp_path / f"{kernels.__name__}.py").write_text(KERNELS)
    rec = _zerojit(["record", "-o", "m.json", "--target", "cuda:90", "--report", "--", "python", "app.py", "4",
                    "1,2,3,16"], tmp_path / "cache-record", tmp_path)
    assert rec.returncode == 0, rec.stderr
    assert "zerojit manifest widen m.json --axis recurrent_kernel:B=1..16 -o m-widened.json" in rec.stdout
    every = ",".join(map(str, range(1, 17)))
    wide = widen(read_manifest(tmp_path / "m.json"), ["recurrent_kernel:B=1..16"])
    assert len(wide.kernels[0].specializations) == 16
    write_manifest(wide, tmp_path / "m-widened.json")
    run = _zerojit(["exec", "--manifest", "m-widened.json", "--no-progress", "--no-generic", "--", "python", "app.py",
                    "4", every], tmp_path / "cache-exec", tmp_path)
    assert run.returncode == 0, run.stderr
    assert "ran" in run.stdout and "16 monitored launches, 0 runtime compiles" in run.stderr


FLA_APP = '''
import sys
import torch
from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule
T, H, HV, K, V = 1, 4, 8, 64, 64
for B in [int(b) for b in sys.argv[1].split(",")]:
    q, k = torch.randn(B, T, H, K), torch.randn(B, T, H, K)
    v, g, beta = torch.randn(B, T, HV, V), torch.randn(B, T, HV), torch.rand(B, T, HV)
    fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=torch.randn(B, HV, K, V), output_final_state=True)
print("ran")
'''


@pytest.mark.skipif(triton.__version__ != "3.6.0", reason="FLA compiles for minutes on 2 cores: CI runs it with "
                    "Triton 3.6.0, the release tested on the GPU")
def test_fla_fused_recurrent_over_batch_sizes_1_to_64_with_zero_runtime_compiles(tmp_path):
    """Needs part B of issue 30 (FLA imports under --target). fla-core 0.6.0's
    fused_recurrent_gated_delta_rule_fwd_kernel takes no B (the batch only sizes the grid; T is
    do_not_specialize): the few recorded batch sizes cover 1..64, and widen names what it has."""
    pytest.importorskip("fla")
    (tmp_path / "app.py").write_text(FLA_APP)
    rec = _zerojit(["record", "-o", "m.json", "--target", "cuda:90", "--report", "--", "python", "app.py", "1,2,3,64"],
                   tmp_path / "cache-record", tmp_path)
    assert rec.returncode == 0, rec.stderr
    assert "the key space does not grow with this workload" in rec.stdout
    wide = _zerojit(["manifest", "widen", "m.json", "--axis", "fused_recurrent_gated_delta_rule_fwd_kernel:B=1..64",
                     "-o", "w.json"], tmp_path / "cache-record", tmp_path)
    assert wide.returncode == 2 and "has no parameter 'B'; its parameters: q, k, v," in wide.stderr
    every = ",".join(map(str, range(1, 65)))
    run = _zerojit(["exec", "--manifest", "m.json", "--no-progress", "--no-generic", "--", "python", "app.py", every],
                   tmp_path / "cache-exec", tmp_path)
    assert run.returncode == 0, run.stderr
    assert "ran" in run.stdout and "64 monitored launches, 0 runtime compiles" in run.stderr


def test_the_estimate_takes_each_kernels_own_remembered_compiles_else_all(tmp_path):
    from zerojit.widen import estimate_seconds

    for entry, name in [("A1", "k_one"), ("A2", "k_one"), ("A3", "k_one"), ("B1", "other")]:
        (tmp_path / entry).mkdir()
        (tmp_path / entry / f"{name}.json").write_text("{}")
    remembered = {"A1": 1.0, "A2": 3.0, "A3": 2.0, "B1": 10.0, "GONE": 20.0}
    seconds, how = estimate_seconds({"m.k_one": 4, "m.k_two": 1}, remembered=remembered, folder=str(tmp_path))
    # k_one: median of its own 1, 3, 2 = 2.0; k_two: none of its own, median of all five = 3.0
    assert seconds == 4 * 2.0 + 1 * 3.0
    assert "m.k_one: 4 x 2.00 s (median of its 3 remembered compiles)" in how
    assert how.endswith("m.k_two: 1 x 3.00 s (none of its own remembered: the median of other kernels' compiles, "
                        "which may be far off for this one (a heavy kernel can take 10x as long))")
    assert estimate_seconds({"m.k_one": 4}, remembered={}, folder=str(tmp_path))[0] is None


def test_merge_refuses_a_kernel_whose_source_changed_between_the_recordings(kernels, compile_only_target):
    import dataclasses

    from zerojit.merging import MergeError

    fn = kernels.recurrent_kernel
    a = _record(fn, 4, [1])
    changed = dataclasses.replace(a, kernels=(dataclasses.replace(a.kernels[0], source_hash="0" * 64),))
    with pytest.raises(MergeError, match=r"b.json: kernel .*recurrent_kernel's field 'source_hash' differs from a.json"):
        merge_manifests([("a.json", a), ("b.json", changed)])
    other = dataclasses.replace(a, target="cuda:80")
    with pytest.raises(MergeError, match=r"b.json: field 'target' is 'cuda:80', but a.json's is 'cuda:90'"):
        merge_manifests([("a.json", a), ("b.json", other)])
