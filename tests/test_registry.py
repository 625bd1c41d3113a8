"""The warm-up registry: registration by value, activation scoping, config passing, failures.

Compiles are counted with Triton's own ``knobs.runtime.jit_post_compile_hook`` and the size of
the kernel's in-process cache (both Triton's, not zerojit's bookkeeping).
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

import json
import threading
import time
from collections import defaultdict
from dataclasses import dataclass

import torch
from triton import knobs

from _kernels import ramp_kernel
from zerojit.kernel import JitKernel, LaunchSpec, TritonJitKernel, kernel_launcher
from zerojit.keyspace import choices, trace_dispatch
from zerojit.registry import JitWarmupRegistry, WarmupError, WarmupReport, active_registry
from zerojit.specialization import SpecClass, WarmupTensor, bind, is_aligned, param_classes


@pytest.fixture(scope="module", autouse=True)
def co(module_compile_only_target):
    return module_compile_only_target


class Fill(TritonJitKernel["Fill.CompileKey"]):
    """A kernel whose keys depend on the registered output tensor (its dtype and alignment); a
    BLOCK of 48 fails to compile."""

    kernel = ramp_kernel
    name = "fill"

    @dataclass(frozen=True)
    class CompileKey:
        dtype: str
        aligned: bool
        block: int

    def dispatch(self, *, out, block: int) -> "Fill.CompileKey":
        return self.CompileKey(str(out.dtype).removeprefix("torch."), is_aligned(out), block)

    def get_warmup_keys(self, *, out, blocks=(16, 32)) -> list:
        return trace_dispatch(self.dispatch)(out=out, block=choices(*blocks))

    def warmup_inputs(self, key) -> dict:
        return dict(out=WarmupTensor(getattr(torch, key.dtype), (key.block,), aligned=key.aligned), value=0.5,
                    block=key.block)

    @kernel_launcher(host_only=("block",))
    def __call__(self, *, out, value: float, block: int = 16) -> LaunchSpec:
        return LaunchSpec(grid=(1,), kwargs=dict(BLOCK=block), returns=out)


class FillF32(Fill):
    """Config-free and request-free: one fixed key."""

    def get_warmup_keys(self) -> list:
        return [self.CompileKey("float32", True, 16)]


@pytest.fixture
def compiles(monkeypatch, co):
    """Triton compiles of ramp_kernel in this test (in-process cache emptied first)."""
    cache = ramp_kernel.device_caches[co.device][0]
    cache.clear()
    seen = []

    def hook(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
        if fn.jit_function is ramp_kernel:
            seen.append(key)

    monkeypatch.setattr(knobs.runtime, "jit_post_compile_hook", hook)
    return seen


def fill_cache(co):
    return ramp_kernel.device_caches[co.device][0]


@dataclass(frozen=True)
class RKey:
    request: tuple


class Recorder(JitKernel[RKey]):
    """A pure-Python kernel: its key is its request; compile records the thread and key."""

    CompileKey = RKey

    def __init__(self, delay: float = 0.0):
        self.calls = []
        self.compiled = []
        self.delay = delay

    def get_warmup_keys(self, **request) -> list:
        self.calls.append(request)
        return [RKey(tuple(sorted((k, repr(v)) for k, v in request.items())))]

    def compile(self, key):
        time.sleep(self.delay)
        self.compiled.append((key, threading.get_ident()))
        return ("compiled", key)


# --- registration ---------------------------------------------------------------------------

def test_config_free_kernel_registered_with_no_request(compiles, co):
    reg = JitWarmupRegistry()
    k = FillF32()
    with reg.activate():
        k.register_warmup()
    assert reg.kernels == [k] and reg.requests(k) == [{}]
    report = reg.warmup(progress=False)
    assert report.keys_by_kernel() == {"FillF32": (Fill.CompileKey("float32", True, 16),)}
    assert len(compiles) == 1 and list(fill_cache(co)) == [report.variants[0].triton_key]


def test_61_identical_registrations_compile_each_key_once(compiles, co):
    reg = JitWarmupRegistry()
    with reg.activate():
        for _layer in range(61):  # every layer builds its own instance and its own output buffer
            Fill().register_warmup(out=torch.empty(64, dtype=torch.float32))
    assert len(reg.kernels) == 1 and len(reg.requests(reg.kernels[0])) == 1
    report = reg.warmup(progress=False)
    assert report.num_keys == 2 and report.ok
    assert [k.block for k in report.kernels[0].keys] == [16, 32]
    assert len(compiles) == 2 and len(fill_cache(co)) == 2
    assert sorted(compiles) == sorted(v.triton_key for v in report.variants)


def test_requests_are_compared_by_value():
    reg = JitWarmupRegistry()
    r = Recorder()
    base = torch.zeros(64)
    with reg.activate():
        r.register_warmup(t=torch.zeros(64))
        r.register_warmup(t=torch.ones(64))  # another tensor, same dtype/shape/strides/alignment
        r.register_warmup(t=WarmupTensor(torch.float32, (64,)))  # no memory at all: still the same
        assert len(reg.requests(r)) == 1
        r.register_warmup(t=torch.zeros(65)[1:])  # misaligned
        r.register_warmup(t=torch.zeros(128)[::2])  # strides (2,) instead of (1,)
        r.register_warmup(t=torch.zeros(8, 8))
        r.register_warmup(t=torch.zeros(8, 8).t())  # transposed: strides (1, 8) instead of (8, 1)
        r.register_warmup(t=torch.zeros(64, dtype=torch.float16))
        assert base.data_ptr() % 16 == 0 and torch.zeros(65)[1:].data_ptr() % 16 != 0
        assert len(reg.requests(r)) == 6
        r.register_warmup(n=1)
        r.register_warmup(n=True)  # 1 == True in Python, but Triton classes differ (constexpr 1 / u1)
        r.register_warmup(n=1.0)
        r.register_warmup(n=1)
        r.register_warmup(n=[1, 2], m={"a": 1})
        r.register_warmup(m={"a": 1}, n=[1, 2])
    requests = reg.requests(r)
    assert len(requests) == 10
    assert [type(q["n"]) for q in requests[6:9]] == [int, bool, float]


def test_unhashable_request_value_names_kernel_and_input():
    reg = JitWarmupRegistry()
    with reg.activate(), pytest.raises(TypeError, match=r"Recorder: request input 'ids'"):
        Recorder().register_warmup(ids={1, 2})


def test_registration_outside_activate_is_a_no_op():
    reg = JitWarmupRegistry()
    r = Recorder()
    assert active_registry() is None
    r.register_warmup(n=1)
    with reg.activate():
        assert active_registry() is reg
    r.register_warmup(n=2)
    assert reg.kernels == [] and active_registry() is None
    assert reg.warmup(progress=False).num_keys == 0


def test_nested_activations():
    outer, inner = JitWarmupRegistry(), JitWarmupRegistry()
    r = Recorder()
    with outer.activate():
        r.register_warmup(n=1)
        with inner.activate():
            assert active_registry() is inner
            r.register_warmup(n=2)
        assert active_registry() is outer
        r.register_warmup(n=3)
    assert outer.requests(r) == [{"n": 1}, {"n": 3}]
    assert inner.requests(r) == [{"n": 2}]


def test_concurrent_activations_in_threads():
    regs = [JitWarmupRegistry(), JitWarmupRegistry()]
    r = Recorder()
    both_active = threading.Barrier(3)
    done = threading.Barrier(3)
    errors = []

    def build(i):
        try:
            with regs[i].activate():
                both_active.wait(timeout=10)
                for layer in range(5):
                    r.register_warmup(thread=i, layer=layer)
                    time.sleep(0.001)  # interleave the two threads
                done.wait(timeout=10)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=build, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    both_active.wait(timeout=10)
    r.register_warmup(thread="main")  # the main thread activated nothing: a no-op
    done.wait(timeout=10)
    for t in threads:
        t.join(timeout=10)
    assert not errors
    for i, reg in enumerate(regs):
        assert reg.requests(r) == [{"thread": i, "layer": layer} for layer in range(5)]


# --- warm-up ---------------------------------------------------------------------------------

def test_key_depends_on_registration_argument(compiles, co):
    half = torch.zeros(32, dtype=torch.float16)
    odd = torch.zeros(33)[1:]
    reg = JitWarmupRegistry()
    with reg.activate():
        Fill().register_warmup(out=half, blocks=(16,))
        Fill().register_warmup(out=odd, blocks=(16,))
    report = reg.warmup(progress=False)
    assert report.kernels[0].keys == (Fill.CompileKey("float16", True, 16), Fill.CompileKey("float32", False, 16))
    assert len(compiles) == 2
    for tensor, variant in zip((half, odd), report.variants):
        _, spec, _ = bind(ramp_kernel, tensor, 0.5, 16)  # Triton's binder on the registered tensor
        assert variant.specialization[0] == param_classes(ramp_kernel, spec)["out_ptr"]
    assert [v.specialization[0] for v in report.variants] == [SpecClass("*fp16", "D"), SpecClass("*fp32", "")]
    Fill()(out=half, value=2.0)
    Fill()(out=odd, value=3.0)  # dry launches with the registered tensors: all warm
    assert len(compiles) == 2 and len(fill_cache(co)) == 2


def test_config_goes_only_to_methods_declaring_it():
    class WithConfig(Recorder):
        def get_warmup_keys(self, config, *, n) -> list:
            self.calls.append((config, n))
            return [RKey((config["block"], n))]

    class KwConfig(Recorder):
        def get_warmup_keys(self, *, config=None) -> list:
            self.calls.append(config)
            return [RKey(("kw", config["block"]))]

    a, b, c = WithConfig(), KwConfig(), Recorder()
    cfg = {"block": 64}
    reg = JitWarmupRegistry()
    with reg.activate():
        a.register_warmup(n=3)
        b.register_warmup()
        c.register_warmup(n=5)  # takes no config: must not receive one
    report = reg.warmup(cfg, progress=False)
    assert report.ok
    assert a.calls == [(cfg, 3)] and a.calls[0][0] is cfg
    assert b.calls == [cfg]
    assert c.calls == [{"n": 5}]
    assert report.keys_by_kernel() == {"WithConfig": (RKey((64, 3)),), "KwConfig": (RKey(("kw", 64)),),
                                       "Recorder": (RKey((("n", "5"),)),)}


def test_a_kernel_class_without_get_warmup_keys_is_named_at_warm_up(co):
    class NoListing(JitKernel[RKey]):
        CompileKey = RKey

    reg = JitWarmupRegistry()
    with reg.activate():
        NoListing().register_warmup()
    with pytest.raises(WarmupError) as info:
        reg.warmup(progress=False)
    assert ("NoListing: listing its keys: NotImplementedError: NoListing defines no get_warmup_keys(): a kernel "
            "class lists the CompileKeys a registration request needs there (docs/migrating-a-kernel.md)") \
        in str(info.value)
    with pytest.raises(NotImplementedError, match=r"^NoListing defines no dispatch\(\)"):
        NoListing().dispatch(n=1)


def test_one_failing_key_hides_no_other(compiles, co):
    class BrokenListing(Recorder):
        def get_warmup_keys(self, **request) -> list:
            raise RuntimeError("config has no block_size")

    ok = Recorder()
    reg = JitWarmupRegistry()
    with reg.activate():
        Fill().register_warmup(out=torch.zeros(64), blocks=(16, 48, 32))  # 48: tl.arange fails
        BrokenListing().register_warmup()
        ok.register_warmup(n=1)
    with pytest.raises(WarmupError) as info:
        reg.warmup(progress=False)
    report = info.value.report
    assert isinstance(report, WarmupReport) and not report.ok
    failures = {(f.kernel, f.key) for f in report.failures}
    assert failures == {("fill", Fill.CompileKey("float32", True, 48)), ("BrokenListing", None)}
    fill_failure = next(f for f in report.failures if f.kernel == "fill")
    assert "arange's range must be a power of 2" in fill_failure.error
    msg = str(info.value)
    assert "failed for 1 key and 1 kernel's key listing:" in msg and "fill: key" in msg and "block=48" in msg
    assert "BrokenListing: listing its keys: RuntimeError: config has no block_size" in msg
    keys = report.keys_by_kernel()
    assert [k.block for k in keys["fill"]] == [16, 32]  # tried before and after the failure
    assert keys["Recorder"] == (RKey((("n", "1"),)),) and len(ok.compiled) == 1
    assert len(compiles) == 2 and len(fill_cache(co)) == 2
    again = reg.warmup(progress=False, raise_on_failure=False)
    assert {(f.kernel, f.key) for f in again.failures} == failures


def test_workers_give_the_same_keys_as_serial(compiles, co, monkeypatch):
    monkeypatch.setenv("ZEROJIT_RESTORE", "0")  # the second run's keys go through Triton's lookup
    def run(workers):
        reg = JitWarmupRegistry()
        slow = Recorder(delay=0.05)
        with reg.activate():
            Fill().register_warmup(out=torch.zeros(64), blocks=(16, 32))
            Fill().register_warmup(out=torch.zeros(64, dtype=torch.float16), blocks=(16,))
            for n in range(4):
                slow.register_warmup(n=n)
        fill_cache(co).clear()
        start = len(compiles)
        report = reg.warmup(workers=workers, progress=False)
        return report, slow, compiles[start:]

    serial, slow1, hooks1 = run(1)
    parallel, slow2, hooks2 = run(2)
    assert serial.ok and parallel.ok
    assert serial.keys_by_kernel() == parallel.keys_by_kernel()
    assert [v.triton_key for v in serial.variants[:3]] == [v.triton_key for v in parallel.variants[:3]]
    assert len(hooks1) == len(hooks2) == 3 and sorted(hooks1) == sorted(hooks2)
    assert set(fill_cache(co)) == set(hooks2)
    assert len({tid for _, tid in slow1.compiled}) == 1
    assert len({tid for _, tid in slow2.compiled}) == 2  # really two compile threads


def test_parallel_warmup_of_a_cold_kernel_loses_no_variant(compiles, co, monkeypatch):
    """Triton creates a kernel's per-device cache lazily; made slow (as a first compiler import
    is), two warm-up threads would each create one and one thread's variants would be lost."""
    def slow_binder():
        time.sleep(0.2)
        return ramp_kernel.create_binder()

    monkeypatch.setattr(ramp_kernel, "device_caches", defaultdict(slow_binder))  # a cold kernel
    monkeypatch.setenv("ZEROJIT_RESTORE", "0")  # through Triton's lookup, as the first warm-up of a process
    reg = JitWarmupRegistry()
    with reg.activate():
        Fill().register_warmup(out=torch.zeros(64), blocks=(16, 32))
    report = reg.warmup(workers=2, progress=False)
    cache = fill_cache(co)
    assert len(compiles) == 2 and set(cache) == set(compiles)  # every compiled variant was kept
    assert sorted(v.triton_key for v in report.variants) == sorted(compiles)
    Fill()(out=torch.zeros(64), value=1.0, block=16)
    Fill()(out=torch.zeros(64), value=1.0, block=32)
    assert len(compiles) == 2  # the first launches after warm-up compile nothing


def test_report_is_a_plain_value():
    reg = JitWarmupRegistry()
    with reg.activate():
        Recorder().register_warmup(n=2)
    report = reg.warmup(progress=False, target="cuda:90")
    d = json.loads(json.dumps(report.to_dict()))
    assert d["keys"] == 1 and d["target"] == "cuda:90" and d["failures"] == []
    assert d["kernels"]["Recorder"]["keys"] == [{"request": [["n", "2"]]}]
    assert "Recorder" in report.summary() and "1 key over 1 kernel in" in report.summary()


class NeedsConfig(Recorder):
    """A kernel whose keys come from the model configuration (a required ``config``)."""

    def get_warmup_keys(self, config, **request) -> list:
        return [RKey((("width", repr(config["width"])),))]


def test_a_kernel_that_needs_the_config_says_so_when_warmed_without_it():
    reg = JitWarmupRegistry()
    with reg.activate():
        NeedsConfig().register_warmup()
        Recorder().register_warmup(n=1)
    with pytest.raises(WarmupError) as info:
        reg.warmup(progress=False)
    message = str(info.value)
    assert message.startswith("zerojit warm-up failed for 1 kernel's key listing:")
    assert "NeedsConfig: listing its keys: its get_warmup_keys needs the model configuration: pass it as " \
           "warmup(config=...)" in message
    assert info.value.report.num_keys == 1  # the config-free kernel still warmed
    assert reg.warmup({"width": 8}, progress=False).num_keys == 2


# ------------------------------------------------------------------------------ the worker count
@pytest.mark.parametrize("cores, to_compile, restored, want, why", [
    (16, 111, 0, 16, "16 workers (16 cores, 111 keys to compile)"),
    (4, 111, 0, 4, "4 workers (4 cores, 111 keys to compile)"),
    (64, 111, 0, 27, "27 workers (64 cores, 111 keys to compile)"),  # at least 4 keys a worker
    (2, 21, 0, 2, "2 workers (2 cores, 21 keys to compile)"),
    (16, 9, 102, 2, "2 workers (16 cores, 9 keys to compile)"),      # only what the index left
    (16, 7, 0, 1, "in this process (only 7 keys to compile)"),       # 7 // 4 = 1 worker: none
    (16, 1, 0, 1, "in this process (only 1 key to compile)"),
    (1, 111, 0, 1, "in this process (1 core)"),
    (16, 0, 111, 1, "in this process (all 111 keys restored)"),      # a warm cache
    (16, 0, 0, 1, "in this process (no keys)"),
])
def test_choose_workers_from_the_cores_and_the_keys(cores, to_compile, restored, want, why):
    from zerojit.registry import KEYS_PER_WORKER, choose_workers

    choice = choose_workers(None, cores=cores, to_compile=to_compile, restored=restored)
    assert (choice.workers, choice.why, str(choice)) == (want, why, why)
    assert choice.workers <= max(cores, 1) and (choice.workers == 1 or choice.workers * KEYS_PER_WORKER <= to_compile)


def test_asked_workers_mean_what_they_say_and_a_group_defaults_to_none():
    from zerojit.registry import WorkerChoice, capped_workers, choose_workers

    assert choose_workers(3, cores=16, to_compile=0).workers == 3  # --workers N means N
    assert choose_workers(3, cores=2, to_compile=111).why == "3 workers (as asked)"
    assert capped_workers(3, 2) == WorkerChoice(2, "2 workers (3 asked, capped to the 2 cores)")
    assert capped_workers(4, 1) == WorkerChoice(1, "in this process (4 asked, capped to the 1 core)")
    assert capped_workers(2, 2) == 2 and capped_workers(None, 2) is None
    assert choose_workers(1, cores=16, to_compile=111).why == "in this process (as asked)"
    sharded = choose_workers(None, cores=16, to_compile=111, sharded=True)
    assert (sharded.workers, sharded.why) == (1, "in this process (the process group's ranks share the compiles)")


def test_the_report_says_the_worker_choice(compiles, co, monkeypatch):
    """A cold warm-up of 2 keys on 16 cores compiles in this process (too few keys for two
    workers) and says so; the second, restored, says that; ``workers=1`` says it was asked."""
    import zerojit.registry as registry_module

    monkeypatch.setattr(registry_module, "usable_cores", lambda: 16)
    reg = JitWarmupRegistry()
    with reg.activate():  # keys no other test of this module's cache folder warms
        Fill().register_warmup(out=torch.zeros(64, dtype=torch.float64), blocks=(64, 128))
    cold = reg.warmup(progress=False)
    assert cold.num_keys == 2 and cold.stats.workers == 0
    assert cold.stats.worker_choice == "in this process (only 2 keys to compile)"
    assert "  compile workers: in this process (only 2 keys to compile)" in cold.summary()
    assert cold.to_dict()["stats"]["worker_choice"] == cold.stats.worker_choice
    warm = reg.warmup(progress=False)
    assert warm.stats.restored == 2 and warm.stats.worker_choice == "in this process (all 2 keys restored)"
    asked = reg.warmup(progress=False, workers=2)
    assert asked.stats.workers == 0  # every key restored: none needed
    assert asked.stats.worker_choice == "2 workers (as asked); none started: every key was in the disk cache"
    from zerojit.registry import capped_workers

    capped = reg.warmup(progress=False, workers=capped_workers(64, 2))  # the choice as the CLI makes it
    assert capped.stats.worker_choice == "2 workers (64 asked, capped to the 2 cores); none started: every key was in the disk cache"


@pytest.mark.parametrize("workers", [0, -1, 2.5, "2", True])
def test_workers_must_be_a_whole_number_of_processes(workers):
    reg = JitWarmupRegistry()
    with reg.activate():
        Recorder().register_warmup(n=1)
    with pytest.raises(ValueError, match=r"warmup\(workers=.*\): the number of compile worker processes"):
        reg.warmup(progress=False, workers=workers)


def test_a_target_other_than_the_one_compiled_for_is_refused():
    """warmup(target=...) is recorded in the report and checked against bundles: it must name what
    this process compiles for (here the module's compile-only cuda:90), else nothing warms."""
    reg = JitWarmupRegistry()
    with reg.activate():
        Fill().register_warmup(out=torch.empty(64, dtype=torch.float32), blocks=(16,))
    for wrong in ("cuda:80", "nonsense"):
        with pytest.raises(ValueError, match=rf"warmup\(target='{wrong}'\): this process compiles for 'cuda:90' "
                                             r"\(compile-only\)") as info:
            reg.warmup(progress=False, target=wrong)
        # compile_only(...) is suggested only for what names a target
        assert ("inside compile_only('cuda:80')" in str(info.value)) == (wrong == "cuda:80")
    with pytest.raises(ValueError, match=r"^start_workers\(target='cuda:80'\): this process compiles for 'cuda:90'"):
        reg.start_workers(workers=2, target="cuda:80")
    assert reg.warmup(progress=False, target="cuda:90").target == "cuda:90"


def test_a_warm_up_with_no_gpu_and_no_compile_only_target_says_what_to_do():
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "from zerojit.registry import NoTargetError\n"
        "from zerojit.runner.config import load_config\n"
        "from zerojit.runner.model import register_model\n"
        "config = load_config('dsv4-like')\n"
        "for target in ('device', 'cuda:80'):\n"
        "    try:\n"
        "        register_model(config).warmup(config, progress=False, target=target)\n"
        "    except NoTargetError as e:\n"
        "        print('refused:', e)\n")
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=src)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    plain, targeted = proc.stdout.splitlines()  # one line each
    assert plain.startswith("refused: zerojit warm-up: no GPU is visible and no compile-only target is active")
    assert 'compile_only("cuda:90")' in plain and "target=" not in plain
    assert "warmup(target='cuda:80') checks the target, it does not select one" in targeted
    assert 'compile_only("cuda:80")' in targeted


def test_a_full_disk_is_named_with_the_cache_folder_and_what_to_do(tmp_path, monkeypatch):
    """Triton's write into its cache fails with ENOSPC and names no file: the failure says the
    cache folder's disk is full, its free space (shutil.disk_usage, the reference) and what to do."""
    import errno
    import shutil

    reg = JitWarmupRegistry()
    with reg.activate():
        Fill().register_warmup(out=torch.empty(64, dtype=torch.float32), blocks=(16,))
    Fill.kernel.device_caches.clear()
    monkeypatch.setenv("ZEROJIT_RESTORE", "0")
    folder = tmp_path / "full"
    folder.mkdir()
    monkeypatch.setattr(knobs.cache, "dir", str(folder))
    real_replace = os.replace

    def full(src, dst, *args, **kwargs):  # every new file's last step, as a full disk fails a write
        if str(dst).startswith(str(folder)):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(WarmupError) as info:
        reg.warmup(progress=False)
    text = str(info.value)
    assert "OSError: [Errno 28] No space left on device" in text
    assert f"the disk or quota of Triton's cache folder {str(folder)!r} is full" in text
    free = shutil.disk_usage(folder).free / 2**20
    shown = float(text.split(" MiB free there now")[0].rsplit(", ", 1)[1])
    assert abs(shown - free) < 64, (shown, free)  # (other writers on the disk move it a little)
    assert "point TRITON_CACHE_DIR at another disk" in text


def test_a_cache_folder_no_key_could_use_is_refused_once(tmp_path, monkeypatch):
    """Not one identical failure per key: the folder is named once, with what to do."""
    from zerojit.cache import CacheFolderError

    reg = JitWarmupRegistry()
    with reg.activate():
        Fill().register_warmup(out=torch.empty(64, dtype=torch.float32), blocks=(16, 32))
    Fill.kernel.device_caches.clear()
    monkeypatch.setenv("ZEROJIT_RESTORE", "0")
    (tmp_path / "file").write_text("")
    for folder, what in ((tmp_path / "file", "is a file, not a folder"), (tmp_path / "file" / "sub", "cannot be created"),
                         ("", "is empty")):
        monkeypatch.setattr(knobs.cache, "dir", str(folder))
        with pytest.raises(CacheFolderError, match=what) as info:
            reg.warmup(progress=False)
        assert "point TRITON_CACHE_DIR at a writable folder" in str(info.value)

    # read-only (simulated, so it also holds as root): refused while empty, used once it holds entries
    ro = tmp_path / "ro"
    ro.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: mode != os.W_OK and real_access(p, mode) if str(p) == str(ro)
                        else real_access(p, mode))
    monkeypatch.setattr(knobs.cache, "dir", str(ro))
    with pytest.raises(CacheFolderError, match="is read-only and holds no compiled kernel"):
        reg.warmup(progress=False)
    (ro / "SOMEENTRY").mkdir()
    from zerojit.cache import check_cache_folder

    check_cache_folder("zerojit warm-up")  # a warm cache can be read: not refused


def test_many_keys_failing_alike_are_listed_three_times_then_counted():
    """Seven keys that all fail for one reason: three listed, the other four counted."""
    reg = JitWarmupRegistry()
    with reg.activate():
        Fill().register_warmup(out=torch.zeros(64), blocks=(3, 5, 6, 7, 9, 10, 11))  # none a power of 2
    with pytest.raises(WarmupError) as info:
        reg.warmup(progress=False)
    msg = str(info.value)
    assert msg.startswith("zerojit warm-up failed for 7 keys:\n") and len(info.value.report.failures) == 7
    assert [f"block={b})" in msg for b in (3, 5, 6, 7, 9, 10, 11)] == [True] * 3 + [False] * 4
    assert "\n  ... and 4 more failures with the same error: CompilationError: " in msg
    assert msg.count("arange's range must be a power of 2") == 4  # three listed, one for the rest


def test_the_json_report_labels_phases_stages_and_timeline_spans():
    from zerojit.reports import WarmupStats

    stats = WarmupStats(compiled=2, phases=(("sweep", 0.5), ("load", 0.25)), worker_stages=(("ptx", 1.5),),
                        timeline=(("imports", 0, -0.1, 0.3),), recovered=("a note",))
    data = WarmupReport(kernels=(), stats=stats).to_dict()["stats"]
    assert data["phases"] == [{"phase": "sweep", "seconds": 0.5}, {"phase": "load", "seconds": 0.25}]
    assert data["worker_stages"] == [{"stage": "ptx", "seconds": 1.5}]
    assert data["timeline"] == [{"what": "imports", "worker": 0, "start": -0.1, "end": 0.3}]
    assert data["compiled"] == 2 and data["recovered"] == ["a note"]
    assert json.loads(json.dumps(data)) == data


def test_a_long_kernel_name_keeps_the_summarys_columns_aligned():
    """A kernel named by its module path (a recorded kernel's, often past 40 characters) widens
    the name column for every row, so each row's key count starts at the same column."""
    from zerojit.reports import KernelWarmup, WarmupReport

    long_name = "vendor_library.ops.attention.fused_paged_decode_kernel_with_a_long_name"
    rows = (KernelWarmup("short", ("a",), ("v",), 0.5), KernelWarmup(long_name, ("a", "b"), ("v", "w"), 1.25))
    summary = WarmupReport(kernels=rows, failures=(), seconds=1.0, target="cuda:90").summary()
    [short_row] = [line for line in summary.splitlines() if line.startswith("  short ")]
    [long_row] = [line for line in summary.splitlines() if line.startswith(f"  {long_name} ")]
    assert short_row.index("   1 key ") == long_row.index("   2 keys") == 3 + len(long_name)
    assert long_row.split() == [long_name, "2", "keys", "1.25", "s"]
