"""A key space that learns (issue 29, part 3): each miss after warm-up is appended to the
learned-keys file beside the cache, and the next warm-up warms it.

On CPU, under the compile-only target cuda:90: the misses are real Triton compiles (dry
launches), the keys read back are compared with what Triton's own binder computes for the
launch, and "the next launch is a hit" is proved by the monitor in error mode (a miss would
raise before compiling).
"""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import textwrap
from dataclasses import dataclass

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

import torch
import triton
import triton.language as tl
from typer.testing import CliRunner

from _kernels import LastBlock, PagedScale, SingleKey
from zerojit import JitWarmupRegistry, learned, monitor
from zerojit.cli import app
from zerojit.inputs import CheckedKernel, IntArg, TensorArg, checked_launcher
from zerojit.kernel import LaunchSpec, kernel_launcher
from zerojit.keyspace import DEFAULT_KEY_BUDGET
from zerojit.manifest import encode_specialization, read_manifest
from zerojit.monitor import JitMonitor, RuntimeJitError
from zerojit.specialization import WarmupTensor, bind, scalar_rep

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
TESTS = os.path.dirname(os.path.abspath(__file__))



# The kernels of _kernels.py, as functions of this file's own: the warm-ups here warm learned keys
# (RecordedKernels) of them, and every warm-up stays in this process's history, which a monitor
# built later reads (tests/test_monitor.py's nearest keys would find these).
@triton.jit(do_not_specialize=["n"])
def _learn_scale_kernel(x_ptr, out_ptr, n, block_size, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * block_size, mask=mask)


@triton.jit(do_not_specialize=["num_seqs"])
def _learn_last_kernel(block_table_ptr, out_ptr, num_seqs, MAX_BLOCKS: tl.constexpr):
    pid = tl.program_id(0)
    tl.store(out_ptr + pid, tl.load(block_table_ptr + pid * MAX_BLOCKS + MAX_BLOCKS - 1))


@triton.jit
def _learn_ramp_kernel(out_ptr, value, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, offs.to(out_ptr.dtype.element_ty) * value)


class Paged(PagedScale):
    """PagedScale (warmed with the literal 1 for block_size, so 64 misses), of _learn_scale_kernel."""

    kernel = _learn_scale_kernel


class Last(LastBlock):
    """LastBlock (a new block-table width misses; its launcher dispatches nothing), of _learn_last_kernel."""

    kernel = _learn_last_kernel


paged_scale = Paged()


class Widths(Last):
    """LastBlock whose launcher dispatches its key (the width of the block table): a miss's
    compile_key is what it dispatched."""

    name = "widths"

    @kernel_launcher
    def __call__(self, *, block_table, out) -> LaunchSpec:
        seqs, width = block_table.shape
        key = self.dispatch(max_blocks=width)
        return LaunchSpec(grid=(seqs,), kwargs=dict(num_seqs=seqs, MAX_BLOCKS=key.max_blocks), returns=out)


class BadWidths(Widths):
    """Widths whose warmup_inputs ignore the key's width: a warm-up of any key but 16 dispatches
    CompileKey(16), which the lint's dispatch check refuses."""

    name = "bad_widths"

    def warmup_inputs(self, key) -> dict:
        return dict(block_table=WarmupTensor(torch.int32, (4, 16)), out=WarmupTensor(torch.int32, (4,)))


@triton.jit(do_not_specialize=["n"])
def _scale_kernel(x_ptr, n, RATIO: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * RATIO, mask=offs < n)


class Scale(CheckedKernel["Scale.CompileKey"]):
    """A checked kernel (zerojit.inputs): its CompileKey is ``key_for`` of the launch's inputs."""

    kernel = _scale_kernel

    @dataclass(frozen=True)
    class CompileKey:
        ratio: int

    def dispatch(self, *, ratio: int) -> "Scale.CompileKey":
        return self.CompileKey(ratio)

    def get_warmup_keys(self, *, ratio: int) -> list:
        return [self.CompileKey(ratio)]

    def warmup_inputs(self, key) -> dict:
        return dict(self.fact_inputs(key), x=WarmupTensor(torch.float32, (64,)))

    @checked_launcher(TensorArg("x", 1, torch.float32), IntArg("ratio", 1, 64))
    def __call__(self, key, constexprs, *, x, ratio) -> LaunchSpec:
        return LaunchSpec(grid=(1,), kwargs=dict(constexprs, n=x.numel(), BLOCK=64), returns=x)


JIT_FNS = (_learn_scale_kernel, _learn_last_kernel, _learn_ramp_kernel, _scale_kernel)


class TinyBudget(Widths):
    """Widths with a key budget of 2 (the learned file keeps 2 of its keys at most)."""

    key_budget = 2


class Ramp(SingleKey):
    """A contract kernel of ``_learn_ramp_kernel`` whose CompileKey has no field: its learned keys
    have a compile_key that tells nothing, and are warmed as recorded keys."""

    kernel = _learn_ramp_kernel

    def warmup_inputs(self, key) -> dict:
        return dict(out=WarmupTensor(torch.float32, (16,)), value=0.5, block=16)

    @kernel_launcher(host_only=("block",))
    def __call__(self, *, out, value, block) -> LaunchSpec:
        return LaunchSpec(grid=(1,), kwargs=dict(BLOCK=block), returns=out)


@pytest.fixture
def dry(compile_only_target):
    """Compile-only cuda:90, a fresh cache folder, empty in-process caches; afterwards no monitor
    and nothing remembered of learned files."""
    learned.forget()
    for fn in JIT_FNS:
        fn.device_caches.clear()
    yield compile_only_target
    monitor.shutdown()
    for m in monitor.installed_monitors():
        m.uninstall()
    learned.forget()
    for fn in JIT_FNS:
        fn.device_caches.clear()


def warm(*kernels_requests, mode: str = "warn", **warmup):
    """A new registry warmed with ``(kernel, request)`` pairs, the process monitor in ``mode``."""
    monitor.configure(mode)
    registry = JitWarmupRegistry()
    with registry.activate():
        for kernel, request in kernels_requests:
            kernel.register_warmup(**request)
    return registry.warmup(progress=False, **warmup)


def lines(path) -> list[dict]:
    """The records of ``path``, once this process's queued misses are written (the monitor
    appends them in the background: learned.flush)."""
    assert learned.flush()
    with open(path) as f:
        return [json.loads(line) for line in f]


def launch_64():
    """paged_scale with block_size=64: divisible-by-16, a class its warm-up (the literal 1) lacks."""
    x, out = torch.zeros(64), torch.zeros(64)
    paged_scale(x=x, out=out, block_size=64)
    return x, out


# ---------------------------------------------------------------------------------------------
# Recording
# ---------------------------------------------------------------------------------------------


def test_a_warn_miss_appends_one_record_equal_to_tritons_binder(dry):
    warm((paged_scale, dict(block=64)))
    x, out = launch_64()
    path = learned.learned_path()
    assert path == os.path.join(dry_cache(), ".zerojit", "learned-cuda90-triton" + triton_version() + ".jsonl")
    [record] = lines(path)
    _, spec, _ = bind(Paged.kernel, x, out, 64, 64, BLOCK=64)  # the launch's own arguments
    assert [tuple(p) for p in record["specialization"]] == list(encode_specialization(Paged.kernel, spec))
    assert record["values"] == {"n": scalar_rep(64, specialize=False), "block_size": scalar_rep(64)} == {
        "n": 17, "block_size": 16}
    assert (record["module"], record["qualname"], record["kernel"]) == ("test_learned", "_learn_scale_kernel",
                                                                       "learn_scale")
    assert record["source_hash"] == Paged.kernel.cache_key
    assert record["parameters"] == ["x_ptr", "out_ptr", "n", "block_size", "BLOCK"]
    assert record["constexprs"] == ["BLOCK"] and record["options"] == {}
    assert record["compile_key"] == {"block": 64}  # PagedScale.dispatch of the launch's inputs
    assert (record["triton_version"], record["target"]) == (triton_version(), "cuda:90")

    [read], skipped = learned.read_learned(path)
    assert skipped == [] and read.key.specialization == encode_specialization(Paged.kernel, spec)

    launch_64()  # the same miss again (a new monitor, this process's memo forgotten): nothing appended
    learned.forget()
    with JitMonitor("warn", report=()):
        Paged.kernel.device_caches.clear()
        launch_64()
    assert len(lines(path)) == 1
    assert not learned.record_miss(Paged.kernel, spec, {}, kernel_name="learn_scale")


def test_error_mode_learns_the_key_it_blocks_and_learning_can_be_turned_off(dry, monkeypatch):
    warm((paged_scale, dict(block=64)), mode="error")
    with pytest.raises(RuntimeJitError):
        launch_64()
    [record] = lines(learned.learned_path())
    assert record["specialization"][3] == ["i32", "D"]  # block_size, the argument whose class missed

    os.remove(learned.learned_path())
    learned.forget()
    with JitMonitor("error", report=(), learn=False):
        with pytest.raises(RuntimeJitError):
            launch_64()
    monkeypatch.setenv("ZEROJIT_LEARN", "0")
    with pytest.raises(RuntimeJitError):
        launch_64()
    assert learned.flush() and not os.path.exists(learned.learned_path())


def _ramp_spec(block: int) -> list:
    return [("*fp32", "D"), ("fp32", None), ("constexpr", block)]


WRITER = textwrap.dedent("""
    import sys, threading
    sys.path[:0] = [{tests!r}]
    from triton import knobs
    knobs.cache.dir = {cache!r}
    from _kernels import ramp_kernel
    from zerojit import learned
    from zerojit.compile_only import compile_only

    writer = int(sys.argv[1])
    name = "k" * 5000  # a line past 4 KiB: an O_APPEND write that is not atomic on every file system

    def write(thread):
        for i in range(12):  # keys 0..11 of this writer's band; bands overlap by half
            block = (writer * 5 + thread) * 6 + i
            learned.record_miss(ramp_kernel, [("*fp32", "D"), ("fp32", None), ("constexpr", block)], {{}},
                                kernel_name=name)

    with compile_only("cuda:90"):
        threads = [threading.Thread(target=write, args=(t,)) for t in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
""")


def test_twenty_writers_in_four_processes_leave_whole_lines_each_key_once(tmp_path):
    cache = str(tmp_path / "cache")
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(tests=TESTS, cache=cache))
    env = {**os.environ, "PYTHONPATH": SRC}
    env.pop("TRITON_INTERPRET", None)
    procs = [subprocess.Popen([sys.executable, str(script), str(w)], env=env, stderr=subprocess.PIPE, text=True)
             for w in range(4)]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()
        p.stderr.close()
    path = learned.learned_path(cache, "cuda:90")
    with open(path) as f:
        raw = f.read()
    assert raw.endswith("\n")
    blocks = [json.loads(line)["specialization"][2][1] for line in raw.splitlines()]  # every line whole JSON
    expected = {(w * 5 + t) * 6 + i for w in range(4) for t in range(5) for i in range(12)}
    assert len(blocks) == len(set(blocks)) and set(blocks) == expected == set(range(120 + 6))
    records, skipped = learned.read_learned(path)
    assert skipped == [] and len(records) == 126


# ---------------------------------------------------------------------------------------------
# Reading: what is skipped, and named
# ---------------------------------------------------------------------------------------------


def test_a_corrupted_line_and_records_of_another_triton_target_or_source_are_skipped_and_named(dry):
    path = learned.learned_path()
    assert learned.record_miss(_learn_ramp_kernel, _ramp_spec(64), {}, kernel_name="ramp")
    good = lines(path)[0]
    foreign = [dict(good, triton_version="3.5.0"), dict(good, target="cuda:80"),
               dict(good, source_hash="0" * 64, specialization=_listed(_ramp_spec(128)))]
    with open(path, "a") as f:
        f.write('{"version": 1, "kernel": "torn\n')  # a writer that died mid-line
        for record in foreign:
            f.write(json.dumps(record) + "\n")
        f.write(json.dumps(dict(good, values="seventeen")) + "\n")
    records, skipped = learned.read_learned(path)
    assert [r.line for r in records] == [1]
    reasons = {s.where.rsplit(":", 1)[1]: (s.kernel, s.reason) for s in skipped}
    assert all(s.where.startswith(path + ":") for s in skipped)
    assert reasons["2"][0] is None and reasons["2"][1].startswith("corrupted line: not JSON")
    ramp = "test_learned._learn_ramp_kernel"
    assert reasons["3"] == (ramp, f"learned with Triton 3.5.0, this is Triton {triton_version()}")
    assert reasons["4"] == (ramp, "learned for target cuda:80, not cuda:90")
    assert reasons["5"][1].startswith(f"source hash {_learn_ramp_kernel.cache_key[:12]}... differs from the learned "
                                      "000000000000...")
    assert reasons["6"] == (None, "corrupted line: field 'values' must be a dict, not str")

    # the next append starts on a line of its own; the warm-up warms the good key, names the rest
    assert learned.record_miss(_learn_ramp_kernel, _ramp_spec(32), {}, kernel_name="ramp")
    assert len(learned.read_learned(path)[0]) == 2

    report = warm((Ramp(), {}))
    assert report.learned == 2 and report.learned_through_keys == 0
    assert sorted(map(str, report.learned_skipped)) == sorted(map(str, skipped))  # (the source: checked here)
    assert "learned keys: 2 warmed (0 through their kernel's CompileKey, 2 as recorded keys), 5 skipped" in \
        report.summary()
    assert f"SKIPPED learned key {path}:4: {ramp}: learned for target cuda:80" in report.summary()


def test_a_learned_key_that_fails_to_compile_is_skipped_and_named_never_fatal(dry):
    """A learned key that cannot compile (a constexpr that is no power of two, options a hand
    edit broke) is skipped and named, with how to drop it; the good learned key is warmed."""
    path = learned.learned_path()
    assert learned.record_miss(_learn_ramp_kernel, _ramp_spec(32), {}, kernel_name="ramp")  # line 1: good
    assert learned.record_miss(_learn_ramp_kernel, _ramp_spec(48), {}, kernel_name="ramp")  # line 2: no power of 2
    good = lines(path)[0]
    with open(path, "a") as f:  # hand edits: the second refused when read (an int option), the rest Triton refuses
        for options in ({"num_warps": 3}, {"num_warps": "x"}):
            f.write(json.dumps(dict(good, options=options)) + "\n")
        nonsense = dict(good, specialization=[["nonsense", "D"], ["fp32", None], ["constexpr", 64]])
        f.write(json.dumps(nonsense) + "\n")
    records, [refused] = learned.read_learned(path)
    assert len(records) == 4 and refused.where == f"{path}:4"
    assert refused.reason == "corrupted line: field 'options': 'num_warps' must be an int, not str"
    shown = invoke("learned", "show", "--file", path)
    assert shown.exit_code == 0 and f"{path}: 4 learned keys" in shown.output, shown.output
    assert f"SKIPPED {path}:4: corrupted line: field 'options': 'num_warps' must be an int, not str" in shown.output

    report = warm((Ramp(), {}))  # (raise_on_failure: a failure would raise WarmupError)
    assert report.ok and report.failures == ()
    assert report.learned == 1  # BLOCK=32
    ramp = "test_learned._learn_ramp_kernel"
    reasons = {s.where: (s.kernel, s.reason) for s in report.learned_skipped}
    assert sorted(reasons) == [f"{path}:{n}" for n in (2, 3, 4, 5)], reasons
    drop = (f"(drop it: delete line {{n}} of the learned-keys file, or clear the file: zerojit learned clear "
            f"--file {path})")
    for n, error in ((2, "CompilationError"), (3, "AssertionError"), (5, "ValueError")):
        kernel, reason = reasons[f"{path}:{n}"]
        assert kernel == ramp and reason.startswith(f"failed to compile: {error}"), (n, reason)
        assert reason.endswith(drop.format(n=n)), reason
    summary = report.summary()
    assert "learned keys: 1 warmed (0 through their kernel's CompileKey, 1 as recorded keys), 4 skipped" in summary
    assert f"SKIPPED learned key {path}:4: corrupted line: field 'options': 'num_warps' must be an int" in summary
    assert f"SKIPPED learned key {path}:2: {ramp}: failed to compile: CompilationError" in summary
    assert "FAILED" not in summary and report.to_dict()["failures"] == [], summary


def test_a_learned_key_the_machine_failed_stays_a_failure_with_no_advice_to_drop_it(dry, monkeypatch):
    """A full disk (OSError) is the machine's fault, not the record's: the key fails the warm-up,
    named with the disk's hint, and nothing tells the user to delete a good traffic key."""
    import errno

    from zerojit import triton_compat
    from zerojit.reports import WarmupError

    assert learned.record_miss(_learn_ramp_kernel, _ramp_spec(32), {}, kernel_name="ramp")
    assert learned.flush()
    cache = triton_compat.cache_dir()
    real_replace = os.replace

    def full(src, dst, *args, **kwargs):  # every new cache file's last step, as a full disk fails a write
        if str(dst).startswith(cache) and "/.zerojit" not in str(dst):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(WarmupError) as info:
        warm((Ramp(), {}), generic=False, workers=1)
    text = str(info.value)
    assert "No space left on device" in text and "(learned)" in text, text
    assert "drop it" not in text and info.value.report.learned_skipped == (), text


def test_a_line_nested_too_deep_is_a_corrupted_line_never_a_recursion_error(dry):
    """JSON nested past Python's parser's recursion limit raises RecursionError, no ValueError:
    such a line is skipped and named like any corrupted one, by the appender, the reader, the
    warm-up and `learned show`."""
    path = learned.learned_path()
    assert learned.record_miss(_learn_ramp_kernel, _ramp_spec(32), {}, kernel_name="ramp")
    with open(path, "a") as f:
        f.write("[" * 200000 + "]" * 200000 + "\n")
    learned.forget()  # the appender reads the file afresh: the deep line among the keys it knows
    assert learned.record_miss(_learn_ramp_kernel, _ramp_spec(64), {}, kernel_name="ramp")
    records, [skip] = learned.read_learned(path)
    assert [r.line for r in records] == [1, 3]
    assert skip.where == f"{path}:2" and skip.kernel is None
    assert skip.reason.startswith("corrupted line: not JSON (maximum recursion depth exceeded"), skip.reason
    report = warm((Ramp(), {}))
    assert report.ok and report.learned == 2 and [str(s) for s in report.learned_skipped] == [str(skip)]
    shown = invoke("learned", "show", "--file", path)
    assert shown.exit_code == 0 and f"SKIPPED {path}:2: corrupted line: not JSON" in shown.output, shown.output


def _listed(spec):
    return [list(p) for p in spec]


def test_the_key_budget_caps_each_kernel_with_one_warning(dry, caplog):
    tiny = TinyBudget()
    warm((tiny, dict(max_blocks=16)))
    with caplog.at_level(logging.WARNING, logger="zerojit.learned"):
        for width in (8, 32, 64, 128):
            tiny(block_table=torch.zeros(4, width, dtype=torch.int32), out=torch.zeros(4, dtype=torch.int32))
    records = lines(learned.learned_path())
    assert [r["compile_key"] for r in records] == [{"max_blocks": 8}, {"max_blocks": 32}]  # dispatched
    capped = [r for r in caplog.records if r.name == "zerojit.learned"]
    assert len(capped) == 1 and "TinyBudget has 2 learned keys, its key budget" in capped[0].getMessage()
    # without a class budget: keyspace's default
    assert DEFAULT_KEY_BUDGET == 4096
    assert learned.record_miss(_learn_ramp_kernel, _ramp_spec(16), {}, kernel_name="ramp", key_budget=1)
    assert not learned.record_miss(_learn_ramp_kernel, _ramp_spec(32), {}, kernel_name="ramp", key_budget=1)


def test_an_unwritable_learned_file_warns_once_and_the_launches_go_on(dry, caplog):
    warm((paged_scale, dict(block=64)))
    os.makedirs(learned.learned_path())  # a folder where the file should be: nothing can be appended
    with caplog.at_level(logging.WARNING, logger="zerojit.learned"):
        x, out = launch_64()
        last = Last()
        out2 = last(block_table=torch.zeros(4, 32, dtype=torch.int32), out=torch.zeros(4, dtype=torch.int32))
    assert out is not None and out2 is not None  # both launched (dry launches) and returned their outputs
    warned = [r.getMessage() for r in caplog.records if r.name == "zerojit.learned"]
    assert len(warned) == 1 and "cannot write the learned-keys file" in warned[0] and "serving goes on" in warned[0]
    assert monitor.current().counts().runtime_compiles == 2


@pytest.mark.parametrize("node", ["fifo", "link to /dev/zero"])
def test_a_learned_file_that_is_a_fifo_or_device_is_never_waited_on(dry, caplog, node):
    """A FIFO (its open or read would wait for a writer for ever) or a link to ``/dev/zero``
    (a read without end) where the learned-keys file should be: the launches go on and warn once
    naming it; the next warm-up names it in its report and warms the rest; nothing was written
    through it."""
    warm((paged_scale, dict(block=64)))
    path = learned.learned_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.mkfifo(path) if node == "fifo" else os.symlink("/dev/zero", path)
    kind = "a FIFO" if node == "fifo" else "a symbolic link"
    with caplog.at_level(logging.WARNING, logger="zerojit.learned"):
        launch_64()
        assert learned.flush(timeout=5.0)  # the writer thread did not block on the node
    warned = [r.getMessage() for r in caplog.records if r.name == "zerojit.learned"]
    assert warned == [f"zerojit: cannot write the learned-keys file {path}: it is {kind}, not a regular file; "
                      "misses are not learned, serving goes on"]
    report = warm((paged_scale, dict(block=64)))
    assert report.learned == 0 and report.ok
    assert [(s.where, s.reason) for s in report.learned_skipped] == [
        (path, f"cannot be read: it is {kind}, not a regular file")]
    assert (stat.S_ISFIFO if node == "fifo" else stat.S_ISLNK)(os.lstat(path).st_mode)
    assert learned.clear(path) == 0 and not os.path.lexists(path)  # removed, never opened: learning can go on
    assert os.path.exists("/dev/zero")


# ---------------------------------------------------------------------------------------------
# Warming what was learned
# ---------------------------------------------------------------------------------------------


def test_the_next_warm_up_warms_the_learned_key_so_the_launch_is_a_hit(dry):
    warm((paged_scale, dict(block=64)))
    launch_64()
    Paged.kernel.device_caches.clear()  # as a new process would start: nothing in memory

    report = warm((paged_scale, dict(block=64)), mode="error")
    assert report.learned == 1 and report.learned_through_keys == 0  # its CompileKey is warmed already: recorded
    assert report.keys_by_kernel()["learn_scale (learned)"][0].specialization[3] == ("i32", "D")
    mon = monitor.current()
    before = mon.counts().runtime_compiles
    launch_64()  # error mode: a miss would raise
    assert mon.counts().runtime_compiles == before

    Paged.kernel.device_caches.clear()
    skipped = warm((paged_scale, dict(block=64)), mode="error", learned=False)
    assert skipped.learned == 0 and skipped.learned_file is None and "learned keys" not in skipped.summary()
    with pytest.raises(RuntimeJitError):
        launch_64()


def test_a_contract_kernels_learned_key_goes_through_its_compile_key_and_the_lint(dry):
    last = Last()  # its launcher dispatches nothing: no compile_key, a recorded key
    widths = Widths()
    warm((last, dict(max_blocks=16)), (widths, dict(max_blocks=16)))
    last(block_table=torch.zeros(4, 8, dtype=torch.int32), out=torch.zeros(4, dtype=torch.int32))
    widths(block_table=torch.zeros(4, 32, dtype=torch.int32), out=torch.zeros(4, dtype=torch.int32))
    assert [(r["kernel"], r["compile_key"]) for r in lines(learned.learned_path())] == [
        ("learn_last", None), ("widths", {"max_blocks": 32})]
    Last.kernel.device_caches.clear()

    report = warm((last, dict(max_blocks=16)), (widths, dict(max_blocks=16)), mode="error")
    assert report.keys_by_kernel()["widths"] == (LastBlock.CompileKey(16), LastBlock.CompileKey(32))
    assert report.keys_by_kernel()["learn_last"] == (LastBlock.CompileKey(16),)
    assert (report.learned, report.learned_through_keys) == (2, 1)
    assert "learned keys: 2 warmed (1 through their kernel's CompileKey, 1 as recorded keys)" in report.summary()
    before = monitor.current().counts().runtime_compiles
    last(block_table=torch.zeros(4, 8, dtype=torch.int32), out=torch.zeros(4, dtype=torch.int32))  # hits
    widths(block_table=torch.zeros(4, 32, dtype=torch.int32), out=torch.zeros(4, dtype=torch.int32))
    assert monitor.current().counts().runtime_compiles == before

    # a checked kernel: the key is key_for of the launch's inputs
    scale = Scale()
    warm((scale, dict(ratio=2)))
    scale(x=torch.zeros(64), ratio=3)
    assert lines(learned.learned_path())[-1]["compile_key"] == {"ratio": 3}
    report = warm((scale, dict(ratio=2)), mode="error")
    assert report.keys_by_kernel()["scale"] == (Scale.CompileKey(2), Scale.CompileKey(3))

    # the same learned key of a kernel whose warmup_inputs do not dispatch it: the lint says so
    Last.kernel.device_caches.clear()
    monitor.shutdown()  # (a monitor notes each Triton key once: a new one, as a new process has)
    learned.forget()
    os.remove(learned.learned_path())
    bad = BadWidths()
    warm((bad, dict(max_blocks=16)))
    bad(block_table=torch.zeros(4, 32, dtype=torch.int32), out=torch.zeros(4, dtype=torch.int32))
    report = warm((bad, dict(max_blocks=16)), raise_on_failure=False)
    [failure] = report.failures
    assert failure.key == LastBlock.CompileKey(32) and "dispatched key" in failure.error
    assert "field 'max_blocks' differs (warmed 32, the launch dispatched 16)" in failure.error


def _rank(rank: int, init_file: str, caches: list[str], out: str) -> None:
    os.environ["TRITON_CACHE_DIR"] = caches[rank]
    sys.path.insert(0, TESTS)
    import torch.distributed as dist

    from zerojit.compile_only import compile_only

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    with compile_only("cuda:90"):
        learned.record_miss(_learn_ramp_kernel, _ramp_spec(32 * (rank + 1)), {}, kernel_name="ramp")  # 32, 64
        registry = JitWarmupRegistry()
        with registry.activate():
            Ramp().register_warmup()
        report = registry.warmup(group=dist.group.WORLD, progress=False)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"ok": report.ok, "learned": report.learned,
                   "keys": [repr(k) for k in report.keys_by_kernel()["learn_ramp (learned)"]]}, f)
    dist.destroy_process_group()


def test_ranks_with_cache_folders_of_their_own_warm_every_ranks_learned_keys(tmp_path):
    """A sharded warm-up needs one key space on every rank: each rank learned another miss (its
    own cache folder), and both warm both."""
    import torch.multiprocessing as mp

    mp.spawn(_rank, args=(str(tmp_path / "init"), [str(tmp_path / "c0"), str(tmp_path / "c1")], str(tmp_path)),
             nprocs=2, join=True)
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert results[0] == results[1]
    assert results[0]["ok"] and results[0]["learned"] == 2
    assert results[0]["keys"] == ["RecordedKey(*fp32:D, fp32, =32)", "RecordedKey(*fp32:D, fp32, =64)"]


# ---------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def one_line_exit_2(result, needle: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output)
    text = result.output.strip()
    assert len(text.splitlines()) == 1 and needle in text and "Traceback" not in text, text


def test_learned_show_clear_and_merge_into_a_manifest_that_warms(dry, tmp_path):
    warm((paged_scale, dict(block=64)))
    launch_64()
    cache = dry_cache()
    path = learned.learned_path()

    shown = invoke("learned", "show", "--cache-dir", cache, "--target", "cuda:90")
    assert shown.exit_code == 0, shown.output
    assert f"{path}: 1 learned key" in shown.output
    assert "learn_scale" in shown.output and "RecordedKey(*fp32:D, *fp32:D, i32:nospec, i32:D, =64)" in shown.output
    assert "CompileKey(block=64)" in shown.output
    as_json = json.loads(invoke("learned", "show", "--file", path, "--json").output)
    assert as_json["file"] == path and as_json["skipped"] == []
    assert [r["specialization"] for r in as_json["records"]] == [lines(path)[0]["specialization"]]

    out = tmp_path / "m.json"
    merged = invoke("learned", "merge", "-o", str(out), "--cache-dir", cache, "--target", "cuda:90")
    assert merged.exit_code == 0, merged.output
    assert f"wrote {out}: 1 learned key added (1 kernel, 1 specialization)" in merged.output
    manifest = read_manifest(out)
    [kernel] = manifest.kernels
    assert (kernel.module, kernel.qualname, manifest.target) == ("test_learned", "_learn_scale_kernel", "cuda:90")
    assert kernel.specializations[0].specialization == learned.read_learned(path)[0][0].specialization

    # merged onto a base: the base's keys stay, the learned key is added once
    again = invoke("learned", "merge", "-o", str(tmp_path / "m2.json"), "--manifest", str(out), "--file", path)
    assert again.exit_code == 0 and "0 learned keys added (1 kernel, 1 specialization)" in again.output

    # the same from Python: merge_into_manifest writes what merge -o writes
    _, added, skips = learned.merge_into_manifest([path], tmp_path / "api.json", base=out)
    assert (added, skips) == (0, []) and read_manifest(tmp_path / "api.json") == manifest

    # a key of a function of the program's __main__: its source is in the program's manifest only
    record = {**lines(path)[0], "module": "__main__"}
    main_file = tmp_path / "main.jsonl"
    main_file.write_text(json.dumps(record) + "\n")
    manifest_main, added, skips = learned.merged_manifest([main_file])
    assert (added, manifest_main.kernels) == (0, ())
    assert [(s.where, s.reason) for s in skips] == [(f"{main_file}:1", (
        "defined in the program's __main__: a manifest warms it from the source the program's recording carries; "
        "merge with that manifest as the base (--manifest, base=)"))]

    cleared = invoke("learned", "clear", "--cache-dir", cache, "--target", "cuda:90")
    assert cleared.exit_code == 0 and f"removed {path} (1 line)" in cleared.output
    assert not os.path.exists(path)
    assert "no learned keys" in invoke("learned", "show", "--file", path).output

    # the merged manifest warms the key (no learned file left): the launch is then a hit
    Paged.kernel.device_caches.clear()
    monitor.configure("error")
    report = JitWarmupRegistry().warmup(manifest=str(out), progress=False)
    assert report.num_keys == 1 and report.learned == 0 and not report.skipped
    launch_64()


def _ramp_manifest(tmp_path, learn_block: int | None = None) -> tuple:
    """A manifest of ``_kernels.ramp_kernel`` recorded at BLOCK=16 (compile-only cuda:90), written by
    a child process, with a learned key at BLOCK=``learn_block`` when given; returns the cache
    folder, the manifest and the environment of the child processes that use them."""
    cache = tmp_path / "cache"
    manifest = tmp_path / "m.json"
    learn = "" if learn_block is None else (  # inside the script's compile_only block
        "\n    from zerojit import learned\n"
        f"    assert learned.record_miss(ramp_kernel, [('*fp32', 'D'), ('fp32', None), ('constexpr', {learn_block})], "
        "{}, kernel_name='_kernels.ramp_kernel')")
    script = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{TESTS!r}]
        from triton import knobs
        knobs.cache.dir = {str(cache)!r}
        from _kernels import ramp_kernel
        from zerojit.compile_only import compile_only
        from zerojit.manifest import KernelRecord, Manifest, RecordedSpecialization, write_manifest
        from zerojit import triton_compat as tc
        with compile_only("cuda:90"):
            spec = (("*fp32", "D"), ("fp32", None), ("constexpr", 16))
            write_manifest(Manifest(tc.TRITON_VERSION, "cuda:90", ("app",), (KernelRecord(
                "_kernels", "ramp_kernel", ramp_kernel.cache_key, ("out_ptr", "value", "BLOCK"), ("BLOCK",),
                (RecordedSpecialization(spec, (("value", 0.5),), (), 1),)),)), {str(manifest)!r})""") + learn + "\n"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, TESTS]), "TRITON_CACHE_DIR": str(cache)}
    env.pop("TRITON_INTERPRET", None)
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=300)
    return cache, manifest, env


def _zerojit(env: dict, cwd, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zerojit", *args], env=env, capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def test_warmup_and_exec_warm_learned_keys_unless_no_learned(tmp_path):
    """`zerojit warmup --manifest` and `exec` (child processes, as real start-ups) warm the
    recorded kernel's learned keys, and exec learns what its program missed; --no-learned warms
    none."""
    cache, manifest, env = _ramp_manifest(tmp_path, learn_block=64)

    def zerojit(*args):
        return _zerojit(env, tmp_path, *args)

    shown = zerojit("learned", "show", "--cache-dir", str(cache), "--target", "cuda:90")
    assert shown.returncode == 0, shown.stderr
    [row] = [line for line in shown.stdout.splitlines() if "RecordedKey" in line]
    assert row.split() == ["_kernels.ramp_kernel", "RecordedKey(*fp32:D,", "fp32,", "=64)"]  # (its name once)
    warmed = zerojit("warmup", "--manifest", str(manifest), "--no-progress", "--json", str(tmp_path / "w.json"))
    assert warmed.returncode == 0, warmed.stderr
    assert "2 keys + 2 generic variants over 1 kernel " in warmed.stdout  # (the learned row is its kernel's) and "learned keys: 1 warmed" in warmed.stdout
    assert json.loads((tmp_path / "w.json").read_text())["learned"] == 1
    skipped = zerojit("warmup", "--manifest", str(manifest), "--no-progress", "--no-learned")
    assert skipped.returncode == 0 and "1 key + 1 generic variant over 1 kernel" in skipped.stdout and "learned" not in skipped.stdout

    # exec: a launch the manifest lacks (BLOCK=32) is blocked and learned; the next exec warms it
    program = ["python", "-c", "import torch; from _kernels import ramp_kernel; "
               "ramp_kernel[(1,)](torch.zeros(64), 0.5, BLOCK=32); print('ran')"]
    first = zerojit("exec", "--manifest", str(manifest), "--no-progress", "--", *program)
    assert first.returncode == 1 and "1 runtime compile (1 blocked)" in first.stderr, first.stderr
    again = zerojit("exec", "--manifest", str(manifest), "--no-progress", "--", *program)
    assert again.returncode == 0 and "ran" in again.stdout, again.stderr
    assert "learned keys: 2 warmed" in again.stderr and "1 monitored launch, 0 runtime compiles" in again.stderr
    unlearned = zerojit("exec", "--manifest", str(manifest), "--no-progress", "--no-learned", "--", *program)
    assert unlearned.returncode == 1 and "(1 blocked)" in unlearned.stderr
    assert all("--no-learned" in invoke(command, "--help").output for command in ("exec", "run", "warmup"))


def test_a_learned_key_that_cannot_compile_never_stops_exec_or_warmup(tmp_path):
    """A launch with a constexpr Triton refuses (BLOCK=48, no power of two) is blocked and
    learned; the next `exec` and `warmup --manifest` skip that key and name it, and the program
    runs (it used to fail every start-up: "warm-up failed for 1 key")."""
    cache, manifest, env = _ramp_manifest(tmp_path)
    path = learned.learned_path(str(cache), "cuda:90")

    def zerojit(*args):
        return _zerojit(env, tmp_path, *args)

    def program(block: int) -> list[str]:
        return ["python", "-c", "import torch; from _kernels import ramp_kernel; "
                f"ramp_kernel[(1,)](torch.zeros(64), 0.5, BLOCK={block}); print('ran')"]

    first = zerojit("exec", "--manifest", str(manifest), "--no-progress", "--", *program(48))
    assert first.returncode == 1 and "1 runtime compile (1 blocked)" in first.stderr, first.stderr
    assert [r["specialization"][2] for r in map(json.loads, open(path))] == [["constexpr", 48]]
    skip = f"SKIPPED learned key {path}:1: _kernels.ramp_kernel: failed to compile: CompilationError: "
    drop = f"(drop it: delete line 1 of the learned-keys file, or clear the file: zerojit learned clear --file {path})"

    again = zerojit("exec", "--manifest", str(manifest), "--no-progress", "--", *program(16))
    assert again.returncode == 0 and "ran" in again.stdout, again.stderr
    assert "warm-up failed" not in again.stderr and skip in again.stderr and drop in again.stderr, again.stderr
    assert "learned keys: 0 warmed, 1 skipped" in again.stderr, again.stderr
    warmed = zerojit("warmup", "--manifest", str(manifest), "--no-progress", "--json", str(tmp_path / "w.json"))
    assert warmed.returncode == 0 and skip in warmed.stdout and drop in warmed.stdout, (warmed.stdout, warmed.stderr)
    report = json.loads((tmp_path / "w.json").read_text())
    assert report["failures"] == [] and report["learned"] == 0
    [skipped] = report["learned_skipped"]
    assert skipped["where"] == f"{path}:1" and skipped["reason"].startswith("failed to compile: CompilationError: ")


def test_learned_commands_refuse_bad_input_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    one_line_exit_2(invoke("learned", "show", "--file", "x", "--target", "cuda:90"), "--file and --target conflict")
    one_line_exit_2(invoke("learned", "show", "--file", str(tmp_path)), "is a directory")
    fifo = learned.learned_path(str(tmp_path), "cuda:90")
    os.makedirs(os.path.dirname(fifo))
    os.mkfifo(fifo)  # each command would wait for a writer for ever
    for command in ("show", "merge"):
        extra = ("-o", str(tmp_path / "m.json")) if command == "merge" else ()
        one_line_exit_2(invoke("learned", command, "--target", "cuda:90", "--cache-dir", str(tmp_path), *extra),
                        f"zerojit learned {command}: {fifo}: cannot be read: it is a FIFO, not a regular file")
    cleared = invoke("learned", "clear", "--target", "cuda:90", "--cache-dir", str(tmp_path))
    assert cleared.exit_code == 0 and f"removed {fifo} (0 lines)" in cleared.output, cleared.output
    assert not os.path.lexists(fifo)
    if os.path.exists(fifo + ".lock"):  # (filelock leaves its file; the clear above took it)
        os.unlink(fifo + ".lock")
    os.makedirs(fifo)  # a folder or a device is left alone, and no lock file is made beside it
    one_line_exit_2(invoke("learned", "clear", "--file", "/dev/null"), "cannot be removed: it is a device")
    assert not os.path.exists("/dev/null.lock") and os.path.exists("/dev/null")
    one_line_exit_2(invoke("learned", "clear", "--target", "cuda:90", "--cache-dir", str(tmp_path)),
                    f"{fifo}: cannot be removed: it is a folder, not a regular file")
    assert os.path.isdir(fifo) and not os.path.exists(fifo + ".lock")
    one_line_exit_2(invoke("learned", "clear", "--target", "cuda:1"), "zerojit learned clear: --target 'cuda:1'")
    one_line_exit_2(invoke("learned", "show", "--cache-dir", "", "--target", "cuda:90"), "--cache-dir ''")
    if not torch.cuda.is_available():
        one_line_exit_2(invoke("learned", "show"), "no GPU is visible here: pass --target")
    one_line_exit_2(invoke("learned", "merge", "-o", str(tmp_path / "no" / "m.json"), "--target", "cuda:90"),
                    "zerojit learned merge: --output")
    one_line_exit_2(invoke("learned", "merge", "-o", str(tmp_path / "m.json"), "--manifest",
                           str(tmp_path / "none.json"), "--target", "cuda:90"), "does not exist")
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"format": "zerojit-manifest", "version": 1, "triton_version": "3.5.0",
                                "target": "cuda:90", "command": [], "kernels": []}))
    one_line_exit_2(invoke("learned", "merge", "-o", str(tmp_path / "m.json"), "--manifest", str(base)),
                    "the base manifest was recorded with Triton 3.5.0")


def dry_cache() -> str:
    from zerojit import triton_compat

    return triton_compat.cache_dir()


def triton_version() -> str:
    from zerojit import triton_compat

    return triton_compat.TRITON_VERSION


def test_the_run_report_counts_the_learned_keys_its_warm_up_warmed():
    from zerojit.registry import WarmupReport
    from zerojit.runner.engine import WarmupSummary

    report = WarmupReport(kernels=(), learned=3, learned_through_keys=1, learned_file="f.jsonl")
    summary = WarmupSummary(mode="zerojit", keys=0, seconds=0.0, target="cuda:90", keys_by_kernel={}, report=report)
    assert summary.to_dict()["learned"] == 3
    assert "learned keys: 3 warmed (1 through their kernel's CompileKey, 2 as recorded keys) (f.jsonl)" in \
        report.summary()
    assert (report.to_dict()["learned"], report.to_dict()["learned_file"]) == (3, "f.jsonl")
