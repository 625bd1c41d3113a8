"""Warm start through zerojit's restore index (``zerojit.restore``).

A restored variant must be exactly what Triton's own disk-cache lookup gives for the key: checked
against the ``CompiledKernel`` Triton built when it compiled the key (metadata, packed metadata,
binary, every IR text, source arguments) and against Triton's in-process lookup at launch time
(a launch after the warm start finds it, under the monitor in error mode). Every way the index
can be stale or broken must fall back to Triton's lookup, key by key, with the same result.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

import glob
import hashlib
import json
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton import knobs
from triton.runtime.driver import driver

from zerojit import restore
from zerojit.compile_only import compile_only
from zerojit.kernel import LaunchSpec, TritonJitKernel, kernel_launcher
from zerojit.keyspace import choices, trace_dispatch
from zerojit.monitor import JitMonitor
from zerojit.registry import JitWarmupRegistry
from zerojit.runner.config import load_config
from zerojit.runner.model import register_model
from zerojit.specialization import WarmupTensor


@triton.jit
def _fill_kernel(out_ptr, value, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, offs.to(out_ptr.dtype.element_ty) * value, mask=offs < n)


class Fill(TritonJitKernel["Fill.CompileKey"]):
    """A small kernel with three keys (two blocks x two dtypes, one pair skipped)."""

    kernel = _fill_kernel

    @dataclass(frozen=True)
    class CompileKey:
        block: int
        dtype: torch.dtype

    def get_warmup_keys(self) -> list:
        return trace_dispatch(self.CompileKey)(block=choices(32, 64), dtype=choices(torch.float32, torch.int32))[:3]

    def warmup_inputs(self, key) -> dict:
        return dict(out=WarmupTensor(key.dtype, (key.block * 4,)), value=3, n=key.block * 4 - 1, block=key.block)

    @kernel_launcher(host_only=("block",))
    def __call__(self, *, out, value: int, n: int, block: int = 32) -> LaunchSpec:
        return LaunchSpec(grid=(triton.cdiv(n, block),), kwargs=dict(BLOCK=block), returns=out)


class FastFill(Fill):
    fast_path = True


@pytest.fixture(autouse=True)
def co():
    with compile_only("cuda:90") as drv:
        yield drv


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path))
    return tmp_path


def registry_of(*kernels) -> JitWarmupRegistry:
    registry = JitWarmupRegistry()
    with registry.activate():
        for kernel in kernels:
            kernel.register_warmup()
    return registry


def forget(*kernels) -> None:
    for kernel in kernels:
        kernel.kernel.device_caches.clear()


def read_index(path) -> dict:
    """The body of the restore index at ``path`` (its header line checked)."""
    head, body = open(path, "rb").read().split(b"\n", 1)
    assert json.loads(head) == {"format": "zerojit-restore-index", "sha256": hashlib.sha256(body).hexdigest()}
    return json.loads(body)


def write_index(path, body) -> None:
    """Write ``body`` as the restore index at ``path``, its header's SHA-256 matching it."""
    data = json.dumps(body).encode()
    header = json.dumps({"format": "zerojit-restore-index", "sha256": hashlib.sha256(data).hexdigest()}).encode()
    open(path, "wb").write(header + b"\n" + data)


def variants(report):
    return [(v.kernel, v.key, v.triton_key, v.specialization, v.param_names) for v in report.variants]


def same_compiled_kernel(restored, triton_made) -> None:
    """``restored`` is field for field the CompiledKernel Triton made."""
    assert restored is not triton_made
    assert set(vars(restored)) == set(vars(triton_made))
    assert restored.metadata == triton_made.metadata and restored.metadata._fields == triton_made.metadata._fields
    assert restored.packed_metadata == triton_made.packed_metadata
    assert (restored.hash, restored.name, restored.kernel) == (triton_made.hash, triton_made.name, triton_made.kernel)
    assert restored.metadata_group == triton_made.metadata_group
    assert dict(restored.asm) == dict(triton_made.asm) and len(restored.asm) == len(triton_made.asm) >= 6
    src, ref = restored.src, triton_made.src
    assert (src.fn, src.signature, src.constants, src.attrs) == (ref.fn, ref.signature, ref.constants, ref.attrs)
    assert src.hash() == ref.hash()  # hence Triton's cache key of the entry


def test_a_warm_start_restores_exactly_what_triton_compiled(cache):
    fill = Fill()
    forget(fill)
    cold = registry_of(fill).warmup(progress=False)
    assert cold.ok and cold.num_keys == 3 and cold.stats.compiled == 3 and cold.stats.restored == 0
    assert len(glob.glob(str(cache / ".zerojit" / "restore-*.json"))) == 1

    forget(fill)
    events = []
    knobs.compilation.listener = lambda *, cache_hit, **_: events.append(cache_hit)
    try:
        warm = registry_of(fill).warmup(progress=False)
    finally:
        knobs.compilation.listener = None
    s = warm.stats
    assert (s.restored, s.compiled, s.disk_loads, s.workers) == (3, 0, 0, 0) and events == []
    assert variants(warm) == variants(cold)
    for restored, made in zip(warm.variants, cold.variants):
        same_compiled_kernel(restored.compiled, made.compiled)
        device = driver.active.get_current_device()
        assert fill.kernel.device_caches[device][0][restored.triton_key] is restored.compiled
    assert "3 restored from the disk cache" in s.origin(3)


def test_after_a_warm_start_launches_hit_the_restored_variants(cache):
    fill = Fill()
    forget(fill)
    registry_of(fill).warmup(progress=False)
    forget(fill)
    registry = registry_of(fill)
    report = registry.warmup(progress=False)
    assert report.stats.restored == 3
    with JitMonitor("error", report=report) as monitor:  # a miss would raise before compiling
        for key in fill.get_warmup_keys():
            fill(out=torch.empty(key.block * 4 + 3, dtype=key.dtype, device="meta"), value=5, n=key.block * 4 - 1,
                 block=key.block)
        counts = monitor.counts()
    assert counts.runtime_compiles == 0 and counts.launches == 3


def test_a_warm_start_leaves_what_the_warm_up_launches_left_for_the_first_request(cache):
    """A restored warm start runs no warm-up launch, yet the first request's launch must find
    what one leaves behind: Triton's (specialization, options) -> key memo and zerojit's argument
    plans (generated code). Compared with what the cold warm-up's launches left."""
    fill = Fill()
    state = type(fill)._launch_state
    forget(fill)
    state.plans.clear()
    registry_of(fill).warmup(progress=False)
    device = driver.active.get_current_device()
    cold_memo, cold_plans = dict(fill.kernel.device_caches[device][1]), set(state.plans)
    assert len(cold_memo) == 3 and cold_plans

    forget(fill)
    state.plans.clear()
    assert registry_of(fill).warmup(progress=False).stats.restored == 3
    assert dict(fill.kernel.device_caches[device][1]) == cold_memo
    assert set(state.plans) == cold_plans


def test_a_key_whose_entry_lost_a_file_goes_through_triton_alone(cache):
    fill = Fill()
    forget(fill)
    cold = registry_of(fill).warmup(progress=False)
    gone = cold.variants[1].compiled
    os.unlink(next(p for name, p in gone.metadata_group.items() if name.endswith(".json") and "__grp__" not in name))
    forget(fill)
    warm = registry_of(fill).warmup(progress=False)
    assert (warm.stats.restored, warm.stats.compiled) == (2, 1)  # Triton found no metadata: compiled again
    assert variants(warm) == variants(cold)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "other fingerprint"])
def test_a_broken_or_stale_index_restores_nothing_and_is_rewritten(cache, damage):
    fill = Fill()
    forget(fill)
    cold = registry_of(fill).warmup(progress=False)
    (path,) = glob.glob(str(cache / ".zerojit" / "restore-*.json"))
    data = open(path, "rb").read()
    if damage == "truncated":
        open(path, "wb").write(data[: len(data) // 2])
    elif damage == "garbage":
        open(path, "wb").write(b"not an index")
    else:
        body = read_index(path)
        body["fingerprint"]["python"] = [2, 7]  # made by another Python
        write_index(path, body)
    forget(fill)
    warm = registry_of(fill).warmup(progress=False)
    assert (warm.stats.restored, warm.stats.disk_loads, warm.stats.compiled) == (0, 3, 0)
    assert variants(warm) == variants(cold)
    why = "refused: field 'python' differs" if damage == "other fingerprint" else "is unreadable"
    assert [line.startswith(f"restore index {path} {why}") for line in warm.stats.recovered] == [True]
    forget(fill)
    again = registry_of(fill).warmup(progress=False)
    assert again.stats.restored == 3 and variants(again) == variants(cold)


@pytest.mark.parametrize("field, value", [("triton_version", "3.5.0"), ("triton_build", "0" * 64),
                                          ("format", 6)])
def test_an_index_of_another_triton_is_refused_naming_the_field_and_never_half_used(cache, field, value):
    """An index moved from another Triton version or build (or an older zerojit's) restores
    nothing at all: the warm-up goes through Triton's own lookup, says which field differs, and
    rewrites the index for this Triton."""
    fill = Fill()
    forget(fill)
    cold = registry_of(fill).warmup(progress=False)
    (path,) = glob.glob(str(cache / ".zerojit" / "restore-*.json"))
    assert path.endswith(f"-triton{triton.__version__}.json")  # one index per Triton version
    body = read_index(path)
    ours = body["fingerprint"][field]
    body["fingerprint"][field] = value
    write_index(path, body)
    forget(fill)
    warm = registry_of(fill).warmup(progress=False)
    assert (warm.stats.restored, warm.stats.disk_loads, warm.stats.compiled) == (0, 3, 0)
    assert variants(warm) == variants(cold)
    assert f"restore index {path} refused: field {field!r} differs: the index has {value!r}, this process {ours!r}" \
        in "\n".join(warm.stats.recovered)
    assert read_index(path)["fingerprint"][field] == ours  # rewritten for this Triton
    forget(fill)
    assert registry_of(fill).warmup(progress=False).stats.restored == 3


def test_a_changed_kernel_source_is_not_restored(cache, monkeypatch):
    fill = Fill()
    forget(fill)
    registry_of(fill).warmup(progress=False)
    forget(fill)
    monkeypatch.setattr(_fill_kernel, "hash", "0" * 64)  # Triton's cache_key of an edited kernel
    warm = registry_of(fill).warmup(progress=False)
    assert warm.stats.restored == 0 and warm.stats.compiled == 3  # Triton's own key changed too
    [line] = [r for r in warm.stats.recovered if "not restored" in r]
    assert line.startswith("restore index ") and line.endswith(
        f": 3 keys of kernel {fill.name!r} not restored: its triton.jit function's source, or a function or global "
        "it uses (Triton's cache_key) changed since the index was written; warmed up through Triton's lookup instead")


def test_a_changed_cache_invalidating_environment_is_not_restored(cache, monkeypatch):
    fill = Fill()
    forget(fill)
    registry_of(fill).warmup(progress=False)
    forget(fill)
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")
    warm = registry_of(fill).warmup(progress=False)
    assert warm.stats.restored == 0 and warm.stats.compiled == 3


def test_fast_path_kernels_warm_up_normally_and_record_their_variants(cache):
    fill, fast = Fill(), FastFill()
    forget(fill, fast)
    registry_of(fill, fast).warmup(progress=False)
    forget(fill, fast)
    warm = registry_of(fill, fast).warmup(progress=False)
    assert warm.stats.restored == 3  # Fill's keys; FastFill's went through its warm-up launch
    recorded = fast.fast_variants()  # ... which recorded them for the fast launcher, 3 per warm-up
    assert len(recorded) == 6 and {v.triton_key for v in recorded} == {v.triton_key for v in warm.variants}


def test_the_dsv4_key_space_restores_in_full_with_the_serial_result(cache):
    config = load_config("dsv4-like")
    registry = register_model(config)
    plan = registry.warmup_keys(config)[0]
    forget(*plan)
    cold = registry.warmup(config, progress=False)
    forget(*plan)
    warm = register_model(config).warmup(config, progress=False)
    assert warm.num_keys == cold.num_keys == 21 and warm.stats.restored == 21 and warm.stats.compiled == 0
    assert variants(warm) == variants(cold)
    for restored, made in zip(warm.variants, cold.variants):
        same_compiled_kernel(restored.compiled, made.compiled)


@pytest.mark.gpu
def test_on_a_gpu_a_restored_warm_start_serves_the_trace_checked_with_nothing_loaded_late(tmp_path):
    """Two runs of the main job over one cache folder: the second restores every key, then replays
    the trace with zero runtime compiles, no module load on the request path, and its sampled
    steps equal to the PyTorch references."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    src = str(Path(restore.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=src, TRITON_CACHE_DIR=str(tmp_path / "cache"))
    runs = []
    for i in range(2):
        out = tmp_path / f"run{i}.json"
        proc = subprocess.run([sys.executable, "-m", "zerojit", "run", "--device", "cuda", "--requests", "300",
                               "--check", "4", "--no-progress", "--json", str(out)], env=env, capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        runs.append(json.loads(out.read_text()))
    cold, warm = runs
    assert cold["warmup"]["stats"]["restored"] == 0
    stats = warm["warmup"]["stats"]
    assert (stats["restored"], stats["compiled"], stats["disk_loads"]) == (21, 0, 0)
    assert warm["runtime_compiles"] == 0 and warm["request_path"]["compiles"] == 0
    assert warm["request_path"]["loads"] == 0 and warm["ok"]


def test_a_fresh_checkout_of_the_same_code_still_restores(cache):
    fill = Fill()
    forget(fill)
    registry_of(fill).warmup(progress=False)
    st = os.stat(__file__)
    os.utime(__file__, ns=(st.st_atime_ns, st.st_mtime_ns + 10**10))  # as a new clone would have
    restore._module_stamp.cache_clear()
    try:
        forget(fill)
        warm = registry_of(fill).warmup(progress=False)
    finally:
        os.utime(__file__, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert warm.stats.restored == 3


def test_an_edited_kernel_class_module_is_not_restored(cache, monkeypatch):
    fill = Fill()
    forget(fill)
    registry_of(fill).warmup(progress=False)
    forget(fill)
    monkeypatch.setattr(restore, "_module_stamp", lambda path: "edited")  # its warmup_inputs may differ now
    warm = registry_of(fill).warmup(progress=False)
    assert (warm.stats.restored, warm.stats.disk_loads, warm.stats.compiled) == (0, 3, 0)
    assert [r.split(": ", 1)[1] for r in warm.stats.recovered if "not restored" in r] == [
        f"3 keys of kernel {fill.name!r} not restored: the module of its kernel class ({__file__}) changed since the "
        "index was written; warmed up through Triton's lookup instead"]


@pytest.mark.parametrize("damage", ["lost cubin", "garbage metadata"])
def test_a_damaged_entry_is_compiled_again_not_a_failed_warm_up(cache, monkeypatch, damage):
    """Triton alone would call the entry a hit and fail on every warm-up (KeyError: 'cubin', or a
    bare JSONDecodeError naming no entry)."""
    monkeypatch.setenv("ZEROJIT_RESTORE", "0")  # through Triton's lookup (the index would only fall back to it)
    fill = Fill()
    forget(fill)
    cold = registry_of(fill).warmup(progress=False)
    broken = cold.variants[0].compiled
    if damage == "lost cubin":
        os.unlink(next(p for name, p in broken.metadata_group.items() if name.endswith(".cubin")))
    else:
        meta = next(p for name, p in broken.metadata_group.items() if name.endswith(".json") and "__grp__" not in name)
        with open(meta, "w") as f:
            f.write("{not json")
    forget(fill)
    warm = registry_of(fill).warmup(progress=False)
    assert warm.ok and (warm.stats.compiled, warm.stats.disk_loads) == (1, 2)
    assert variants(warm) == variants(cold) and warm.variants[0].compiled.kernel == broken.kernel
    assert os.path.isfile(next(p for name, p in warm.variants[0].compiled.metadata_group.items() if name.endswith(".cubin")))
