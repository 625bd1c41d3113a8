"""Kernels defined in the program's own ``__main__``: recorded with their source
(``program_source``), rebuilt by the warm-up, bound to the program's functions at their first
launch under ``zerojit exec`` (:mod:`zerojit.script_kernels`).

Compile-only (cuda:90), through the real CLI in subprocesses. References are independent of
zerojit: Triton's own ``cache_key`` of the program's functions, the lines of the app's text, the
launches the app makes.
"""

from __future__ import annotations

import json
import os
import re
import runpy
import shutil
import sys

import pytest
from _cli import run_zerojit as _zerojit

from zerojit import monitor
from zerojit.manifest import ManifestError, read_manifest


# Two kernels of the script itself: one calls a __main__ helper that reads a module-level
# tl.constexpr, one is wrapped by triton.heuristics and reads another. Three launches.
APP = '''
import torch
import triton
import triton.language as tl

SCALE = tl.constexpr(2)
BLOCK_M = tl.constexpr(64)


@triton.jit
def twice(x):
    return x * SCALE


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, twice(tl.load(x_ptr + offs, mask=mask)), mask=mask)


@triton.heuristics({"EVEN": lambda args: args["n"] % 64 == 0})
@triton.jit
def even_kernel(x_ptr, n, EVEN: tl.constexpr):
    offs = tl.arange(0, BLOCK_M)
    if EVEN:
        tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)
    else:
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


if __name__ == "__main__":
    x = torch.zeros(256)
    scale_kernel[(4,)](x, torch.empty_like(x), 256, BLOCK=64)
    even_kernel[(1,)](x, 64)
    even_kernel[(1,)](x, 50)
    print("ran")
'''




def _exec(manifest, cache, cwd, *more):
    return _zerojit(["exec", "--manifest", str(manifest), "--jit-monitor-mode", "error", "--target", "cuda:90",
                     "--no-progress", *more, "--", "python", "app.py"], cache, cwd)


def _line_of(text: str, start: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith(start))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """APP recorded for cuda:90: ``(folder, manifest path, record's result)``; tests copy what they edit."""
    root = tmp_path_factory.mktemp("script-app")
    (root / "app.py").write_text(APP)
    umask = os.umask(0o002)  # many systems' default for users: new files group-writable
    try:
        rec = _zerojit(["record", "-o", "m.json", "--target", "cuda:90", "--", "python", "app.py"],
                       root / "rec-cache", root)
    finally:
        os.umask(umask)
    assert rec.returncode == 0 and "ran" in rec.stdout, rec.stderr
    # a manifest that carries source is code: written writable by its owner only, whatever the umask
    assert os.stat(root / "m.json").st_mode & 0o777 == 0o644
    return root, root / "m.json", rec


def test_an_app_whose_kernels_live_in_its_main_is_recorded_then_execd_with_zero_runtime_compiles(recorded, tmp_path):
    root, manifest, rec = recorded
    assert "zerojit record: warning" not in rec.stderr, rec.stderr  # every kernel can be warmed
    kernels = {k["qualname"]: k for k in json.loads(manifest.read_text())["kernels"]}
    assert sorted(kernels) == ["even_kernel", "scale_kernel"]
    scale = kernels["scale_kernel"]["program_source"]
    # lines as Triton has them: the block starts at the first decorator, the def below it
    def_line = _line_of(APP, "def scale_kernel")
    assert (scale["line"], scale["def_line"]) == (def_line - 1, def_line)
    even = kernels["even_kernel"]["program_source"]
    assert (even["line"], even["def_line"]) == (_line_of(APP, "@triton.heuristics"), _line_of(APP, "def even_kernel"))
    assert scale["source"].startswith("def scale_kernel(") and scale["filename"].endswith("app.py")
    assert scale["globals"]["tl"] == {"import": "triton.language:"}
    assert scale["globals"]["twice"]["script"]["globals"] == {"SCALE": {"value": 2, "constexpr": True}}
    assert even["globals"]["BLOCK_M"] == {"value": 64, "constexpr": True}

    # from a fresh cache, the warm-up's workers rebuild and compile them; the program's own
    # functions are bound at their first launch: 3 launches, all hits
    out = tmp_path / "exec.json"
    run = _exec(manifest, tmp_path / "fresh", root, "--workers", "2", "--json", str(out))
    assert run.returncode == 0 and "ran" in run.stdout, run.stderr
    assert "SKIPPED" not in run.stderr and "not warmed" not in run.stderr, run.stderr
    assert "compiled by 2 worker processes" in run.stderr, run.stderr
    data = json.loads(out.read_text())
    assert (data["launches"], data["runtime_compiles"], data["blocked"]) == (3, 0, 0)
    assert "zerojit exec: 3 monitored launches, 0 runtime compiles" in run.stderr


# One __main__ kernel (after its imports and ``extra`` ones), launched at the sizes given on the
# command line.
SCALE_KERNEL = '''
import sys

import torch
import triton
import triton.language as tl
{extra}

@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)

'''
SIZES_APP = SCALE_KERNEL.format(extra="") + '''
x = torch.zeros(256)
for n in sys.argv[1:]:
    scale_kernel[(4,)](x, torch.empty_like(x), int(n), BLOCK=64)
print("ran")
'''


@pytest.mark.skipif("fallback" not in monitor.MODES, reason="fallback mode (zerojit.serving) is not in this tree")
def test_a_main_kernels_miss_is_served_by_its_generic_variant_and_compiled_in_the_background(tmp_path):
    """A key of a __main__ kernel the recording never saw (n=1, Triton's equal-to-one class;
    recorded: 256, divisible by 16), under exec's fallback mode: the bound program function gets
    the rebuilt one's generic variant, so the miss is a fallback launch, its key compiles in a
    background worker rebuilt from the recorded source (0 request-path compiles), and the next
    exec warms the learned key from the entry that worker wrote. In error mode the blocked miss is
    explained against the recorded key, not as a kernel no manifest warmed."""
    (tmp_path / "app.py").write_text(SIZES_APP)
    cache = tmp_path / "cache"
    rec = _zerojit(["record", "-o", "m.json", "--target", "cuda:90", "--", "python", "app.py", "256"], cache, tmp_path)
    assert rec.returncode == 0 and "ran" in rec.stdout, rec.stderr

    def exec_(mode, out):
        return _zerojit(["exec", "--manifest", "m.json", "--jit-monitor-mode", mode, "--target", "cuda:90",
                         "--no-progress", "--json", str(out), "--", "python", "app.py", "1"], cache, tmp_path)

    blocked = _zerojit(["exec", "--manifest", "m.json", "--target", "cuda:90", "--no-progress", "--", "python",
                        "app.py", "1"], tmp_path / "other-cache", tmp_path, env={"ZEROJIT_LEARN": "0"})
    assert blocked.returncode == 1, blocked.stderr
    assert "n: warmed as divisible-by-16, called as equal-to-one" in blocked.stderr, blocked.stderr
    assert "no manifest warmed it" not in blocked.stderr

    served = exec_("fallback", tmp_path / "served.json")
    assert served.returncode == 0 and "ran" in served.stdout, served.stderr
    data = json.loads((tmp_path / "served.json").read_text())
    assert (data["runtime_compiles"], data["request_path_compiles"], data["fallback_launches"],
            data["background_compiles"], data["background_failures"]) == (0, 0, 1, 1, 0), served.stderr
    assert data["warmup"]["generic_variants"] == 1

    again = exec_("fallback", tmp_path / "again.json")
    assert again.returncode == 0, again.stderr
    data = json.loads((tmp_path / "again.json").read_text())
    # the recorded key and the learned one, both entries on disk already (the second the worker's)
    assert (data["warmup"]["keys"], data["warmup"]["learned"], data["warmup"]["stats"]["disk_loads"]) == (2, 1, 2)
    assert (data["fallback_launches"], data["background_compiles"], data["request_path_compiles"]) == (0, 0, 0)


def test_a_line_inserted_above_a_kernel_names_it_as_changed_and_triton_compiles_it(recorded, tmp_path):
    root, manifest, _ = recorded
    text = APP.replace("\n@triton.heuristics", "\n# a comment added above even_kernel only\n@triton.heuristics")
    (tmp_path / "app.py").write_text(text)
    out = tmp_path / "exec.json"
    run = _exec(manifest, tmp_path / "fresh", tmp_path, "--json", str(out))
    assert run.returncode == 1 and "ran" not in run.stdout and "Traceback" not in run.stderr, run.stderr
    notes = [line for line in run.stderr.splitlines() if "not warmed" in line]
    assert len(notes) == 1, run.stderr
    why = ("its source changed since recording (source hash {}... differs from the recorded {}...: its source, its "
           "starting line (a line added or removed above it counts), a function it calls or a global it reads "
           "changed): record the program again")
    was = next(k["source_hash"] for k in json.loads(manifest.read_text())["kernels"] if k["qualname"] == "even_kernel")
    now = re.search(r"its source changed since recording \(source hash ([0-9a-f]{12})\.\.\.", notes[0]).group(1)
    assert now != was[:12]
    assert notes == [f"zerojit exec: __main__.even_kernel: not warmed (Triton compiles it at run time): "
                     f"{why.format(now, was[:12])}"], run.stderr
    # the blocked compile gives the same reason (not "no manifest warmed it"), its arguments once
    assert "would compile at run time" in run.stderr and "'even_kernel'" in run.stderr
    assert f"  the manifest recorded it, but {why.format(now, was[:12])}\n" in run.stderr
    assert "no manifest warmed it" not in run.stderr and "launched raw" not in run.stderr
    assert run.stderr.count("x_ptr: *fp32") == 1 and run.stderr.count("runtime specialization") == 1, run.stderr
    data = json.loads(out.read_text())
    # scale_kernel (unchanged) was bound and hit; even_kernel's first launch was blocked (a launch counted too)
    assert (data["launches"], data["runtime_compiles"], data["blocked"]) == (2, 1, 1)
    assert "zerojit exec: 2 monitored launches, 1 runtime compile (1 blocked)" in run.stderr


def test_the_closing_line_counts_every_launch_of_a_main_kernel_exec_could_not_bind(tmp_path):
    """SIZES_APP recorded launching its __main__ kernel 3 times, then its source edited: exec
    cannot bind the program's function to the rebuilt one, so Triton compiles it, yet each of its
    launches is counted: warn mode 3 launches (1 compile, the later two hit Triton's cache); error
    mode blocks the first, a launch counted as well."""
    (tmp_path / "app.py").write_text(SIZES_APP)
    cache = tmp_path / "cache"
    sizes = ["256", "256", "256"]
    rec = _zerojit(["record", "-o", "m.json", "--target", "cuda:90", "--", "python", "app.py", *sizes], cache, tmp_path)
    assert rec.returncode == 0 and "ran" in rec.stdout, rec.stderr
    (tmp_path / "app.py").write_text(SIZES_APP.replace("mask=mask) * 2", "mask=mask) * 3"))

    def exec_(mode):
        out = tmp_path / f"{mode}.json"
        run = _zerojit(["exec", "--manifest", "m.json", "--jit-monitor-mode", mode, "--target", "cuda:90",
                        "--no-progress", "--json", str(out), "--", "python", "app.py", *sizes], cache, tmp_path,
                       env={"ZEROJIT_LEARN": "0"})
        assert "__main__.scale_kernel: not warmed (Triton compiles it at run time): its source changed" in run.stderr
        data = json.loads(out.read_text())
        return run, (data["launches"], data["runtime_compiles"], data["blocked"])

    warned, counts = exec_("warn")
    assert warned.returncode == 1 and "ran" in warned.stdout, warned.stderr
    assert counts == (3, 1, 0), warned.stderr
    assert warned.stderr.splitlines()[-1] == "zerojit exec: 3 monitored launches, 1 runtime compile"

    blocked, counts = exec_("error")
    assert blocked.returncode == 1 and "ran" not in blocked.stdout, blocked.stderr
    assert counts == (1, 1, 1), blocked.stderr
    assert blocked.stderr.splitlines()[-1] == "zerojit exec: 1 monitored launch, 1 runtime compile (1 blocked)"


def test_the_audit_counts_a_main_kernels_launches_under_its_miss_bound_or_not(tmp_path):
    """SIZES_APP recorded at n=256, exec'd at 256, 1, 1 under `zerojit audit` (warn mode): the
    bound program function's n=1 variant (a miss, compiled into the program function's own cache,
    not the rebuilt one's) has its 2 launches counted under its MISS, not as a variant "neither
    warmed nor monitored"; and so do the launches of each variant of one exec could not bind (its
    source edited), whose misses are filed under the program's function."""
    (tmp_path / "app.py").write_text(SIZES_APP)
    cache = tmp_path / "cache"
    rec = _zerojit(["record", "-o", "m.json", "--target", "cuda:90", "--", "python", "app.py", "256"], cache, tmp_path)
    assert rec.returncode == 0 and "ran" in rec.stdout, rec.stderr
    key = "RecordedKey(*fp32:D, *fp32:D, i32:D, =64)"
    args = "x_ptr: *fp32 16-byte-aligned, out_ptr: *fp32 16-byte-aligned, n: {}, BLOCK: constexpr 64"

    def audit():
        run = _zerojit(["audit", "--", sys.executable, "-m", "zerojit", "exec", "--manifest", "m.json",
                        "--jit-monitor-mode", "warn", "--target", "cuda:90", "--no-progress", "--", "python", "app.py",
                        "256", "1", "1"], cache, tmp_path, env={"ZEROJIT_LEARN": "0"})
        assert "ran" in run.stdout and "zerojit coverage audit" in run.stdout, run.stderr
        return [line for line in run.stdout.splitlines() if line.startswith(("  hit", "  dead", "  MISS", "  other"))]

    assert audit() == [
        f"  hit   {key}  (1 launch)",
        f"  MISS  {args.format('equal-to-one')}  (1 miss: 1 compiled, 0 from disk cache, 0 blocked; 2 launches)"]

    (tmp_path / "app.py").write_text(SIZES_APP.replace("mask=mask) * 2", "mask=mask) * 3"))
    lines = audit()
    assert lines[0].startswith(f"  dead  {key}  (0 launches"), lines
    assert lines[1:] == [
        f"  MISS  {args.format('i32 divisible-by-16')}  (1 miss: 1 compiled, 0 from disk cache, 0 blocked; 1 launch)",
        f"  MISS  {args.format('equal-to-one')}  (1 miss: 1 compiled, 0 from disk cache, 0 blocked; 2 launches)"]


UNCARRIED = '''
import torch
import triton
import triton.language as tl


def make_helper():
    @triton.jit
    def helper(x):
        return x + 1

    return helper


helper = make_helper()


@triton.jit
def uses_helper(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, helper(tl.load(x_ptr + offs)))


uses_helper[(1,)](torch.zeros(64), BLOCK=64)
print("ran")
'''


def test_a_kernel_reading_a_global_a_manifest_cannot_carry_is_named_when_recorded_and_warmed(tmp_path):
    (tmp_path / "app.py").write_text(UNCARRIED)
    rec = _zerojit(["record", "-o", "m.json", "--target", "cuda:90", "--", "python", "app.py"], tmp_path / "c", tmp_path)
    assert rec.returncode == 0 and "ran" in rec.stdout, rec.stderr
    why = ("defined in the program's __main__, and its global 'helper' is the jit function "
           "'make_helper.<locals>.helper', defined inside a function; a warm-up cannot rebuild it: record the program "
           "again once it can")
    assert [line for line in rec.stderr.splitlines() if line.startswith("zerojit record:")] == [
        f"zerojit record: warning: a manifest cannot warm __main__.uses_helper (warmup and exec skip it): {why}"]
    (kernel,) = json.loads((tmp_path / "m.json").read_text())["kernels"]
    assert kernel["program_source"] == {"qualname": "uses_helper", "skipped": why.split("its ", 1)[1].split(";")[0]}
    warm = _zerojit(["warmup", "--manifest", "m.json", "--target", "cuda:90", "--no-progress"], tmp_path / "c2", tmp_path)
    assert warm.returncode == 1, warm.stderr  # nothing warmed
    assert f"  SKIPPED __main__.uses_helper: {why}\n" in warm.stdout + warm.stderr


def test_a_manifest_carrying_source_that_other_users_can_write_to_is_refused(recorded, tmp_path):
    root, manifest, _ = recorded
    shared = tmp_path / "m.json"
    shutil.copy(manifest, shared)
    for mode in (0o664, 0o646):
        os.chmod(shared, mode)
        for command in (["warmup", "--manifest", str(shared), "--target", "cuda:90", "--no-progress"],
                        ["exec", "--manifest", str(shared), "--target", "cuda:90", "--no-progress", "--", "python",
                         "app.py"]):
            run = _zerojit(command, tmp_path / "c", root)
            assert run.returncode == 2 and "ran" not in run.stdout, run.stderr
            (line,) = run.stderr.splitlines()
            assert line.startswith(f"zerojit {command[0]}: {shared}: refused: it carries program source "
                                   "(__main__.scale_kernel, __main__.even_kernel)"), line
            assert ("group-writable" if mode == 0o664 else "world-writable") in line
        with pytest.raises(ManifestError, match="refused"):
            read_manifest(shared, to_run=True)
        assert len(read_manifest(shared).kernels) == 2  # reading it (not to run it) is fine
    os.chmod(shared, 0o644)
    assert len(read_manifest(shared, to_run=True).kernels) == 2


def test_a_rebuilt_function_hashes_as_the_programs_own_and_a_shifted_one_does_not(tmp_path):
    from zerojit.script_kernels import Rebuilder, capture

    (tmp_path / "app.py").write_text(APP)
    program = runpy.run_path(str(tmp_path / "app.py"), run_name="not_main")  # defines the kernels, launches none
    for fn in (program["twice"], program["scale_kernel"], program["even_kernel"].fn):
        fn.fn.__module__ = "__main__"  # (run_path's module name: only __main__ kernels are captured)
    for name in ("scale_kernel", "even_kernel"):
        jit_fn = program[name] if name == "scale_kernel" else program[name].fn
        data = json.loads(json.dumps(capture(jit_fn)))  # as a manifest carries it
        rebuilt = Rebuilder().function(data)
        assert rebuilt is not jit_fn and rebuilt.cache_key == jit_fn.cache_key, name
        assert (rebuilt.src, rebuilt.starting_line_number) == (jit_fn.src, jit_fn.starting_line_number)
        shifted = Rebuilder().function({**data, "line": data["line"] + 1, "def_line": data["def_line"] + 1})
        assert shifted.cache_key != jit_fn.cache_key, name  # Triton hashes the starting line


TUNED = '''
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"])
@triton.jit
def tuned(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


x = torch.zeros(256)
tuned[lambda m: (triton.cdiv(256, m["BLOCK"]),)](x, 256)
print("ran")
'''


def test_an_autotuned_kernel_of_main_records_its_configs_and_execs_with_zero_runtime_compiles(tmp_path):
    """Both configs of a triton.autotune object defined in the script (found in the script's own
    namespace after it ended) are recorded with their config and warmed; exec binds the program's
    autotuner at its first launch and gives its tuning key the default policy (no benchmark), so
    error mode passes: the chosen config's launches are hits."""
    (tmp_path / "app.py").write_text(TUNED)
    rec = _zerojit(["record", "-o", "m.json", "--target", "cuda:90", "--", "python", "app.py"], tmp_path / "c", tmp_path)
    assert rec.returncode == 0 and "ran" in rec.stdout and "zerojit record: warning" not in rec.stderr, rec.stderr
    (kernel,) = json.loads((tmp_path / "m.json").read_text())["kernels"]
    configs = [s["autotune_config"] for s in kernel["specializations"]]
    assert [c["BLOCK"] for c in configs] == [64, 128], configs
    out = tmp_path / "exec.json"
    run = _zerojit(["exec", "--manifest", "m.json", "--jit-monitor-mode", "error", "--target", "cuda:90", "--no-progress",
                    "--json", str(out), "--", "python", "app.py"], tmp_path / "fresh", tmp_path)
    assert run.returncode == 0 and "ran" in run.stdout, run.stderr
    data = json.loads(out.read_text())
    assert (data["launches"], data["runtime_compiles"], data["benchmarks"]) == (1, 0, 0), run.stderr
    assert data["untuned_tuning_keys"] == 1 and "1 tuning key(s) untuned under compile-only" in run.stderr


def test_the_programs_function_is_bound_at_first_launch_to_the_warmed_variants_and_then_skips_the_hook(
        tmp_path, compile_only_target, monkeypatch):
    """In-process: record APP, warm its manifest, then run APP again under count_raw_launches.
    Each of the program's new functions gets, at its first launch, the very CompiledKernel
    objects the warm-up compiled for the rebuilt function (nothing compiles: no new object), and
    its later launches never look up the class-level JITFunction.run (the binding hook)."""
    import torch
    from triton.runtime.jit import JITFunction

    from zerojit import JitWarmupRegistry
    from zerojit.manifest import RecordedKernel, write_manifest
    from zerojit.recording import Recorder, count_raw_launches
    from zerojit.triton_compat import every_kernel_cache

    app = str(tmp_path / "app.py")
    (tmp_path / "app.py").write_text(APP)
    recorder = Recorder().install()
    try:
        runpy.run_path(app, run_name="__main__")
    finally:
        recorder.uninstall()
    write_manifest(recorder.manifest(["python", "app.py"]), tmp_path / "m.json")
    os.chmod(tmp_path / "m.json", 0o600)
    registry = JitWarmupRegistry()
    registry.warmup(manifest=tmp_path / "m.json", workers=1, generic=False, learned=False)
    warmed = {k.record.qualname: k.kernel for k in registry.kernels if isinstance(k, RecordedKernel)}
    compiled = {name: {id(c) for cache in every_kernel_cache(fn) for c in cache.values()} for name, fn in warmed.items()}
    assert [len(compiled["scale_kernel"]), len(compiled["even_kernel"])] == [1, 2]

    restore = count_raw_launches(list(registry.kernels))
    try:
        program = runpy.run_path(app, run_name="__main__")  # its first launches bind
        for name in ("scale_kernel", "even_kernel"):
            fn = program[name] if name == "scale_kernel" else program[name].fn
            assert fn is not warmed[name] and "run" in vars(fn), name
            assert {id(c) for cache in every_kernel_cache(fn) for c in cache.values()} == compiled[name], name

        def hook_called(*args, **kwargs):
            raise AssertionError("a bound function's launch went through the class-level run")

        with monkeypatch.context() as m:
            m.setattr(JITFunction, "run", hook_called)
            x = torch.zeros(256)
            program["scale_kernel"][(4,)](x, torch.empty_like(x), 256, BLOCK=64)
            program["even_kernel"][(1,)](x, 50)
    finally:
        restore()
    assert "run" not in vars(program["scale_kernel"])  # unwrapped again


def test_a_malformed_program_source_is_refused_naming_the_field(tmp_path):
    good = {"qualname": "k", "filename": "app.py", "line": 3, "def_line": 4, "source": "def k(x):\n    pass\n",
            "future_annotations": False, "options": {"debug": None}, "globals": {"tl": {"import": "triton.language:"}}}
    cases = [({"line": 0}, "fields 'line' and 'def_line'"), ({"def_line": 2}, "fields 'line' and 'def_line'"),
             ({"source": 7}, "field 'source' must be a string"),
             ({"options": {"version": 1}}, "field 'options' holds ['version']"),
             ({"globals": {"tl": {"import": "triton.language"}}}, ".globals.tl: field 'import' must be 'module:qualname'"),
             ({"globals": {"N": {"value": 1, "import": "m:x"}}}, ".globals.N: must be an object with one of"),
             ({"globals": {"N": {"value": [1, 2]}}}, ".globals.N: field 'value' must be a JSON scalar"),
             ({"globals": {"h": {"script": {"qualname": "h"}}}}, ".globals.h.script: field 'filename' must be a string")]
    path = tmp_path / "m.json"

    def write(program_source):
        kernel = {"module": "__main__", "qualname": "k", "source_hash": "0" * 64, "parameters": ["x"], "constexprs": [],
                  "specializations": [], "program_source": program_source}
        path.write_text(json.dumps({"format": "zerojit-manifest", "version": 1, "triton_version": "3.6.0",
                                    "target": "cuda:90", "command": ["python", "app.py"], "kernels": [kernel]}))

    for change, message in cases:
        write({**good, **change})
        with pytest.raises(ManifestError) as info:
            read_manifest(path)
        assert str(info.value).startswith(f"{path}: kernels[0].program_source") and message in str(info.value), \
            (change, str(info.value))
    write(good)
    assert read_manifest(path).kernels[0].program_source == good
    write({"qualname": "k", "skipped": "why"})  # a skipped one needs nothing else
    assert read_manifest(path).kernels[0].program_source["skipped"] == "why"


# SIZES_APP's kernel on the GPU, its outputs checked against torch at every launch, waiting for
# the background compile and swapping it in between its two launches of the unrecorded size.
GPU_APP = SCALE_KERNEL.format(extra="\nimport zerojit.serving as serving\n") + '''
x = torch.arange(256, device="cuda", dtype=torch.float32)
sizes = [int(n) for n in sys.argv[1:]]
for i, n in enumerate(sizes):
    out = torch.full_like(x, -1.0)
    scale_kernel[(4,)](x, out, n, BLOCK=64)
    want = torch.full_like(x, -1.0)
    want[:n] = x[:n] * 2
    assert torch.equal(out, want), (n, out)
    if i == 0 and len(sizes) > 1:
        assert serving.wait_idle(180), "the background compile did not finish in 180 s"
        serving.between_requests()  # (exec's default swap: between requests, as an engine marks them)
print("ran", flush=True)
'''


@pytest.mark.gpu
def test_on_a_gpu_a_main_kernels_miss_is_served_then_swapped_and_both_launches_are_right(tmp_path):
    """On a GPU (exec's default mode there is fallback): recorded at n=256, launched at n=1
    twice; the first launch is the generic variant's (a fallback launch), the background compile
    is swapped in before the second (the program calls between_requests()), and both outputs
    equal torch's."""
    (tmp_path / "app.py").write_text(GPU_APP)
    cache = tmp_path / "cache"
    rec = _zerojit(["record", "-o", "m.json", "--", "python", "app.py", "256"], cache, tmp_path)
    assert rec.returncode == 0 and "ran" in rec.stdout, rec.stderr
    done = _zerojit(["exec", "--manifest", "m.json", "--no-progress", "--json", "out.json", "--", "python", "app.py",
                     "1", "1"], cache, tmp_path)
    assert done.returncode == 0 and "ran" in done.stdout, done.stderr
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["monitor_mode"] == "fallback"
    assert (data["request_path_compiles"], data["fallback_launches"], data["background_compiles"], data["swaps"],
            data["background_failures"]) == (0, 1, 1, 1, 0), done.stderr
