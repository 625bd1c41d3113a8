"""Issue 30, section 4: a raw ``triton.autotune`` kernel (``zerojit.examples.tuned_scale``'s, no
zerojit class, no TuningPolicy) recorded under a compile-only target, then exec'd: the manifest
(version 2) holds each tuning key's launch, exec gives the untuned keys the default policy
(0 benchmarks, 0 compiles, error mode), a GPU warm-up tunes them on buffers of the recorded
layout (bookkeeping tested here with a fake benchmark; the GPU run is test_recorded_tuning_gpu).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch

from zerojit import triton_compat as _tc
from zerojit.manifest import (VERSION, KernelRecord, RecordedTuning, TensorLaunch, TuningLaunch, read_manifest,
                              write_manifest)
from zerojit.recorded_tuning import build_buffer, install_default_policy, launch_arguments, tune_recorded

pytestmark = pytest.mark.skipif(_tc.interpreting(), reason="compile-only recording (no TRITON_INTERPRET)")

SRC = str(Path(__file__).resolve().parents[1] / "src")

# A program launching the autotuned kernel raw (the library's own path), one launch per size;
# "1000v": at 1000 through a strided view (every other element, from element 3) of a larger buffer.
APP = textwrap.dedent("""
    import sys
    import torch
    import triton
    from zerojit.examples.tuned_scale import tuned_scale_kernel

    for word in sys.argv[1:]:
        n = int(word.rstrip("v"))
        x = torch.arange(2 * n + 3, dtype=torch.float32)[3::2] if word.endswith("v") else torch.ones(n)
        out = torch.empty(n)
        tuned_scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n, 2.0)
""")


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=SRC, TRITON_CACHE_DIR=str(tmp / "cache"), TRITON_HOME=str(tmp / "home"))
    env.pop("ZEROJIT_JIT_MONITOR", None)
    return env


def _zerojit(tmp: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zerojit", *args], cwd=tmp, env=env or _env(tmp),
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """The app recorded under --target cuda:90 with --report, at sizes 100 and 1000 (a view)."""
    tmp = tmp_path_factory.mktemp("tuned_app")
    (tmp / "app.py").write_text(APP)
    done = _zerojit(tmp, "record", "--target", "cuda:90", "--report", "-o", "m.json", "--", "python", "app.py",
                    "100", "1000v")
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp, done


def test_v2_manifest_records_each_tuning_key_launch(recorded):
    tmp, done = recorded
    data = json.loads((tmp / "m.json").read_text())
    assert data["version"] == VERSION == 2
    manifest = read_manifest(tmp / "m.json")
    (kernel,) = manifest.kernels
    assert kernel.name == "zerojit.examples.tuned_scale.tuned_scale_kernel"
    by_key = {t.key: t for t in kernel.tunings}
    assert set(by_key) == {(100, "torch.float32", "torch.float32"), (1000, "torch.float32", "torch.float32")}
    assert all(t.config is None for t in kernel.tunings)  # compile-only: nothing measured, no choice

    # the launch at 100: contiguous tensors of 100 elements; at 1000: the view arange(2003)[3::2]
    base = torch.arange(2 * 1000 + 3, dtype=torch.float32)[3::2]
    want_view = TensorLaunch("float32", tuple(base.shape), tuple(base.stride()), base.storage_offset(),
                             base.untyped_storage().nbytes() // base.element_size())
    assert want_view == TensorLaunch("float32", (1000,), (2,), 3, 2003)
    launch = by_key[(1000, "torch.float32", "torch.float32")].launch
    args = dict(launch.arguments)
    assert launch.positional == 4  # x, out, n, scale passed positionally; HAS_SCALE by the heuristic, a keyword
    assert list(args) == ["x_ptr", "out_ptr", "n", "scale", "HAS_SCALE"]
    assert args["x_ptr"] == want_view
    assert args["out_ptr"] == TensorLaunch("float32", (1000,), (1,), 0, 1000)
    assert (args["n"], args["scale"], args["HAS_SCALE"]) == (1000, 2.0, True)
    # the grid per config's meta-parameters: cdiv(1000, BLOCK)
    assert dict(launch.grids) == {(("BLOCK", 64),): (16,), (("BLOCK", 256),): (4,), (("BLOCK", 1024),): (1,)}
    small = dict(by_key[(100, "torch.float32", "torch.float32")].launch.arguments)
    assert small["x_ptr"] == TensorLaunch("float32", (100,), (1,), 0, 100) and small["n"] == 100

    # written and read back whole
    write_manifest(manifest, tmp / "again.json")
    assert read_manifest(tmp / "again.json") == manifest

    # record --report says the keys hold no choice, and how to give them
    lines = [line for line in done.stdout.splitlines() if line.startswith("tuning:")]
    assert len(lines) == 1, done.stdout
    assert lines[0].startswith("tuning: 2 tuning key(s) of 1 autotuned kernel(s) hold no choice")
    assert "record on a GPU" in lines[0] and "'tunings'" in lines[0] and "at warm-up on a GPU" in lines[0]


def test_manifest_versions_1_and_2_read(tmp_path):
    v1 = {"format": "zerojit-manifest", "version": 1, "triton_version": _tc.TRITON_VERSION, "target": "cuda:90",
          "command": ["python", "app.py"], "program_folder": None,
          "kernels": [{"module": "m", "qualname": "k", "source_hash": "h", "parameters": ["n", "B"],
                       "constexprs": ["B"], "specializations": [],
                       "tunings": [{"key": [8, "torch.float32"], "config": {"B": 64, "num_warps": 4}}]}]}
    (tmp_path / "v1.json").write_text(json.dumps(v1))
    (kernel,) = read_manifest(tmp_path / "v1.json").kernels
    assert kernel.tunings == (RecordedTuning((8, "torch.float32"), (("B", 64), ("num_warps", 4)), None),)

    v2 = json.loads(json.dumps(v1))
    v2["version"] = 2
    v2["kernels"][0]["tunings"] = [{"key": [8, "torch.float32"], "config": None, "launch": {
        "positional": 1, "arguments": {"x": {"tensor": {"dtype": "float32", "shape": [2, 4], "strides": [1, 2],
                                                        "offset": 1, "storage": 9}}, "n": 8},
        "grids": [{"config": {"B": 64}, "grid": [1, 2]}]}}]
    (tmp_path / "v2.json").write_text(json.dumps(v2))
    (kernel,) = read_manifest(tmp_path / "v2.json").kernels
    assert kernel.tunings == (RecordedTuning((8, "torch.float32"), None, TuningLaunch(
        1, (("x", TensorLaunch("float32", (2, 4), (1, 2), 1, 9)), ("n", 8)), (((("B", 64),), (1, 2)),))),)

    v2["kernels"][0]["tunings"][0]["launch"]["arguments"]["x"]["tensor"]["strides"] = [1]
    (tmp_path / "bad.json").write_text(json.dumps(v2))
    with pytest.raises(ValueError, match=r"tunings\[0\]\.launch\.arguments\.x\.tensor: field 'strides'"):
        read_manifest(tmp_path / "bad.json")


def test_build_buffer_has_the_recorded_layout():
    view = TensorLaunch("float16", (3, 4), (1, 5), 2, 20)
    t = build_buffer(view, "cpu")
    assert (t.dtype, tuple(t.shape), t.stride(), t.storage_offset()) == (torch.float16, (3, 4), (1, 5), 2)
    assert t.untyped_storage().nbytes() // t.element_size() == 20
    assert not t.any()  # zeros: index-reading kernels stay in bounds
    with pytest.raises(ValueError, match="does not fit a storage of 10 elements"):
        build_buffer(TensorLaunch("float32", (3, 4), (1, 5), 2, 10), "cpu")

    launch = TuningLaunch(2, (("x", view), ("n", 12), ("flag", True)), (((("BLOCK", 64),), (7,)),))
    args, kwargs = launch_arguments(launch, "cpu")
    assert len(args) == 2 and args[0].shape == (3, 4) and args[1] == 12
    assert list(kwargs) == ["grid", "warmup", "flag"] and kwargs["flag"] is True and kwargs["warmup"] is False
    assert kwargs["grid"]({"BLOCK": 64, "n": 12}) == (7,)


def _tuned_scale_record(tunings) -> KernelRecord:
    from zerojit.examples.tuned_scale import tuned_scale_kernel

    jit_fn = _tc.unwrap_jit_function(tuned_scale_kernel)
    return KernelRecord("zerojit.examples.tuned_scale", "tuned_scale_kernel", _tc.source_hash(jit_fn),
                        _tc.parameter_names(jit_fn), _tc.ordered_constexpr_parameters(jit_fn), (), tuple(tunings))


def test_tune_recorded_benchmarks_once_then_reads_the_tuning_file(tmp_path, monkeypatch):
    from zerojit.examples.tuned_scale import tuned_scale_kernel

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    tuner = _tc.find_autotuner(tuned_scale_kernel)
    configs = _tc.autotune_configs(tuner)
    key = (300, "torch.float32", "torch.float32")
    launch = TuningLaunch(4, (("x_ptr", TensorLaunch("float32", (300,), (1,), 0, 300)),
                              ("out_ptr", TensorLaunch("float32", (300,), (2,), 1, 601)), ("n", 300), ("scale", 2.0),
                              ("HAS_SCALE", True)), (((("BLOCK", 256),), (2,)),))
    kernel = types.SimpleNamespace(record=_tuned_scale_record([RecordedTuning(key, None, launch)]))
    calls = []

    def fake_benchmark(tuner_, args, kwargs):  # the autotuner's run, as tune_recorded calls it
        calls.append((tuner_, [(tuple(a.shape), a.stride(), a.storage_offset()) if isinstance(a, torch.Tensor) else a
                               for a in args], {k: v for k, v in kwargs.items() if k != "grid"}))
        return configs[3]

    try:
        out = tune_recorded([kernel], target="cuda:90", gpu="FAKE GPU", device="cpu", benchmark=fake_benchmark)
        assert (out.tuned, out.loaded, out.notes) == (1, 0, [])
        assert calls == [(tuner, [((300,), (1,), 0), ((300,), (2,), 1), 300, 2.0],
                          {"warmup": False, "HAS_SCALE": True})]
        assert _tc.autotuner_choices(tuner)[key] is configs[3]
        (path,) = out.files
        saved = json.loads(Path(path).read_text())
        assert (saved["kernel"], saved["gpu"], saved["target"]) == (kernel.record.name, "FAKE GPU", "cuda:90")
        assert saved["entries"] == [{"key": list(key), "config": 3, "ms": None}]

        tuner.cache.clear()  # the next start: read from the file, nothing benchmarked
        out = tune_recorded([kernel], target="cuda:90", gpu="FAKE GPU", device="cpu", benchmark=fake_benchmark)
        assert (out.tuned, out.loaded, len(calls), out.files) == (0, 1, 1, [])
        assert _tc.autotuner_choices(tuner)[key] is configs[3]

        tuner.cache.clear()  # another GPU's file: not used, tuned again
        out = tune_recorded([kernel], target="cuda:90", gpu="OTHER GPU", device="cpu", benchmark=fake_benchmark)
        assert (out.tuned, len(calls)) == (1, 2) and "field 'gpu' differs" in out.notes[0]

        def failing(*_):
            raise RuntimeError("out of resources")

        tuner.cache.clear()  # a benchmark that fails: named, the key left to the default policy
        os.remove(path)
        out = tune_recorded([kernel], target="cuda:90", gpu="FAKE GPU", device="cpu", benchmark=failing)
        assert (out.tuned, out.files, key in tuner.cache) == (0, [], False)
        assert out.notes == [f"{kernel.record.name}: tuning key {key}: the autotuner's benchmark failed (RuntimeError: "
                             "out of resources): left to the default policy"]
    finally:
        tuner.cache.clear()


def test_default_policy_nearest_tuned_else_first_surviving_compiled():
    from zerojit.examples.tuned_scale import tuned_scale_kernel
    from zerojit.manifest import RecordedSpecialization, encode_config

    tuner = _tc.find_autotuner(tuned_scale_kernel)
    configs = _tc.autotune_configs(tuner)  # BLOCK 64/256/1024 x num_warps 2/4; pruned to BLOCK <= max(64, 2n)
    record = _tuned_scale_record([])
    carried = tuple(RecordedSpecialization((), autotune_config=encode_config(configs[i].all_kwargs())) for i in (1, 3, 5))
    kernel = types.SimpleNamespace(record=KernelRecord(record.module, record.qualname, record.source_hash,
                                                      record.parameters, record.constexprs, carried))
    launched = []
    # a zerojit kernel class warmed earlier in this process (TunedScale) leaves its wrapper on the
    # autotuner's run, which the policy leaves alone: this test stands for a program without one
    saved = {k: tuner.__dict__.pop(k) for k in ("run", "_zerojit_original_run") if k in tuner.__dict__}
    tuner.run = lambda *args, **kwargs: launched.append(tuner.cache[_tc.tuning_key(
        tuner, dict(zip(_tc.layer_arg_names(tuner), args)), kwargs)])  # stands for Triton's run
    tuner.cache[(1000, "torch.float32", "torch.float32")] = configs[5]  # tuned (restored): BLOCK 1024, 4 warps
    try:
        policy = install_default_policy([kernel])
        x = torch.ones(8)
        for n in (5000, 100, 1000):
            tuned_scale_kernel.run(x, x, n, 2.0, grid=(1,), warmup=False)
        policy.restore()
    finally:
        tuner.__dict__.pop("run", None)
        tuner.__dict__.update(saved)
        tuner.cache.clear()
    # 5000: nearest tuned key 1000 (its config survives); 100: BLOCK 1024 is pruned there, so the
    # first surviving config a recorded specialization compiled (config 0, 64/2 warps, never compiled)
    # is config 1; 1000 was tuned: no decision
    assert launched == [configs[5], configs[1], configs[5]]
    assert policy.decisions == {(kernel.record.name, (5000, "torch.float32", "torch.float32")): "nearest",
                                (kernel.record.name, (100, "torch.float32", "torch.float32")): "first"}
    assert policy.line(compile_only=True) == ("2 tuning key(s) untuned under compile-only: default policy "
                                              "(1 nearest tuned, 1 first surviving config), 0 benchmarks")


def _exec(tmp: Path, manifest: str, *sizes: str) -> tuple[subprocess.CompletedProcess, dict]:
    env = _env(tmp)
    env["TRITON_CACHE_DIR"] = str(tmp / f"fresh-{manifest}")  # a fresh cache: the warm-up compiles it all
    done = _zerojit(tmp, "exec", "--manifest", manifest, "--target", "cuda:90", "--jit-monitor-mode", "error",
                    "--workers", "1", "--no-progress", "--json", f"{manifest}.exec.json", "--", "python", "app.py",
                    *sizes, env=env)
    return done, json.loads((tmp / f"{manifest}.exec.json").read_text())


def _policy_lines(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if "untuned under compile-only" in line]


def test_exec_compile_only_recording_of_raw_autotuned_kernel_runs_in_error_mode(recorded):
    tmp, _ = recorded
    # recorded sizes and sizes never recorded (1, 37, 5000, 100000)
    done, data = _exec(tmp, "m.json", "100", "1000v", "37", "5000", "100000", "1")
    assert done.returncode == 0, done.stderr
    assert (data["runtime_compiles"], data["blocked"], data["benchmarks"], data["launches"]) == (0, 0, 0, 6)
    assert "autotune benchmark" not in done.stderr
    assert _policy_lines(done) == ["zerojit exec: 6 tuning key(s) untuned under compile-only: default policy "
                                   "(0 nearest tuned, 6 first surviving config), 0 benchmarks"]
    assert data["untuned_tuning_keys"] == 6


def test_exec_hand_filled_tuning_is_the_nearest_for_unrecorded_keys(recorded):
    tmp, _ = recorded
    data = json.loads((tmp / "m.json").read_text())
    (kernel,) = data["kernels"]
    big = next(s["autotune_config"] for s in kernel["specializations"] if s["autotune_config"]["BLOCK"] == 1024)
    for t in kernel["tunings"]:
        if t["key"][0] == 1000:
            t["config"] = big  # the documented field, filled by hand
    (tmp / "filled.json").write_text(json.dumps(data))
    # 5000v and 100000v: through views like the recorded one at 1000, for which BLOCK 1024 was compiled
    # 7000: contiguous (x 16-byte aligned), for which only BLOCK 64 was compiled (at 100)
    done, out = _exec(tmp, "filled.json", "100", "1000v", "37", "5000v", "100000v", "1", "7000")
    assert done.returncode == 0, done.stderr
    assert "1 autotune choice of the recording restored" in done.stderr
    # 5000v and 100000v: nearest tuned key 1000 (BLOCK 1024 survives, compiled for the launch);
    # 100, 37, 1: BLOCK 1024 pruned; 7000: BLOCK 1024 not compiled for it: the first config compiled for it
    assert _policy_lines(done) == ["zerojit exec: 6 tuning key(s) untuned under compile-only: default policy "
                                   "(2 nearest tuned, 4 first surviving config), 0 benchmarks"]
    assert (out["runtime_compiles"], out["blocked"], out["benchmarks"]) == (0, 0, 0)
