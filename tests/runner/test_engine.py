"""``zerojit run``: the reference runner on the shipped trace slice, its report, its errors.

In-process runs share one process's Triton caches, so a variant compiled by an earlier run could
hide a miss of a later one; every in-process run therefore also asserts the audit's *unwarmed
hits* are zero (a launch of a variant its own warm-up did not produce). The runs that must start
cold (``--warmup none``, the ``--check`` child) run in fresh processes through the CLI.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import torch
from triton import knobs

from zerojit.runner.engine import RunError, RunOptions, choose_check_steps, run, StepSummary
from zerojit.runner.metadata import REFERENCES, StepMetadata, compare_metadata, random_positions
from zerojit.runner.trace import TraceError

SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture(scope="module")
def triton_cache(tmp_path_factory):
    """One Triton disk cache for this module's runs (in process and in children)."""
    path = str(tmp_path_factory.mktemp("triton-cache-engine"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(knobs.cache, "dir", path)
        yield path


def cli(args: list[str], cache_dir: str, *, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m zerojit run ...`` in a fresh process."""
    full = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p),
                TRITON_CACHE_DIR=cache_dir, **(env or {}))
    full.pop("TRITON_INTERPRET", None)
    full.pop("ZEROJIT_JIT_MONITOR", None)
    return subprocess.run([sys.executable, "-m", "zerojit", "run", "--no-progress", *args], env=full,
                          capture_output=True, text=True, timeout=600)


def unwarmed_hits(report) -> int:
    return sum(u.hits for k in report.audit.kernels for u in k.unwarmed_hits)


# ------------------------------------------------------------------------------ zero runtime JIT
@pytest.mark.parametrize(
    "config, dcp",
    [
        ("deepseek-v3.2", None),
        ("dsv4-like", None),
        ("dsv4-like", (2, 0)),
        ("dsv4-like", (2, 1)),
        ("deepseek-v3.2", (2, 1)),
    ],
    ids=["v3.2", "dsv4", "dsv4-dcp2-rank0", "dsv4-dcp2-rank1", "v3.2-dcp2-rank1"],
)
def test_zero_runtime_compiles_in_error_mode(triton_cache, config, dcp):
    dcp_size, dcp_rank = dcp or (None, None)
    report = run(RunOptions(config=config, requests=80, device="cpu", dcp_size=dcp_size, dcp_rank=dcp_rank,
                            jit_monitor_mode="error", progress=False))
    assert report.runtime_compiles == 0
    assert report.audit.runtime_compiles == 0
    assert unwarmed_hits(report) == 0
    assert report.ok
    assert report.requests == 80 and report.steps > 80 and report.launches > report.steps
    assert report.warmup.mode == "zerojit" and report.warmup.keys > 0 and not report.warmup.failures
    # every kernel the backend launches was warmed and launched (no kernel silently dropped out)
    warmed = {k.kernel: k for k in report.audit.kernels}
    from zerojit.kernels.mla.backends import get_backend
    from zerojit.kernels.mla.launches import step_launches

    for name in step_launches(report.config, get_backend(report.backend)).names:
        assert warmed[name].hits > 0, name
    if dcp:
        assert report.backend == "flashmla_sparse_dcp" and report.config.dcp_rank == dcp_rank


def test_speculative_decode_hits_the_uniform_decode_and_draft_variants(triton_cache):
    report = run(RunOptions(config="deepseek-v3.2", requests=50, device="cpu", num_speculative_tokens=2,
                            progress=False))
    assert report.runtime_compiles == 0 and unwarmed_hits(report) == 0
    cov = {k.kernel: k for k in report.audit.kernels}
    assert cov["prepare_uniform_decode"].hits > 0
    swa = cov["compute_swa_indices_and_lens"]
    assert len(swa.warmed) == 2 and not swa.dead  # causal and non-causal both launched


# ------------------------------------------------------------------------------ the report
def test_cli_writes_the_json_report(triton_cache, tmp_path):
    out = tmp_path / "report.json"
    proc = cli(["--config", "dsv4-like", "--requests", "60", "--device", "cpu", "--json", str(out)], triton_cache)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    for key in ("requests", "steps", "runtime_compiles", "tokens", "first_step_ms", "median_step_ms"):
        assert key in data, key
    assert data["requests"] == 60 and data["runtime_compiles"] == 0
    assert data["warmup"]["keys"] > 0 and data["warmup"]["seconds"] > 0
    assert data["audit"]["misses"] == 0 and isinstance(data["audit"]["dead"], int)
    assert "zero runtime compiles" in proc.stdout
    # the tile keys of compute_prefill_metadata above this trace's prefill counts are dead: said why
    assert data["audit"]["dead"] > 0
    assert "note: dead = warmed, never hit by this run (compute_prefill_metadata" in proc.stdout
    assert "1 kernels" not in proc.stdout and "(0 failures)" in proc.stdout


def test_monitor_off_reports_no_count_it_did_not_take(triton_cache, tmp_path):
    """--jit-monitor-mode off installs no monitor: no launch, compile or audit count is reported
    (null in the JSON), and no zero is claimed. The cut key space makes the trace miss 7 times;
    the request-path clock, which hooks Triton in every mode, times those 7 compiles: the request
    path line and the closing line say so, and the run fails (exit 1), as warn mode's does."""
    out = tmp_path / "off.json"
    proc = cli(["--config", "dsv4-like", "--requests", "3", "--device", "cpu", "--cut-keyspace", "--no-learned",
                "--jit-monitor-mode", "off", "--json", str(out)], triton_cache)
    text = proc.stdout
    assert proc.returncode == 1, text + proc.stderr[-3000:]
    assert "  monitor      off: runtime compiles not counted\n" in text and ", launches not counted, " in text
    assert "  request path 7 compiles (" in text
    assert "  audit        not taken (monitor off: no hit or miss counted)" in text
    assert "dead:" not in text and "not a bug" not in text and "zero runtime compiles" not in text
    assert text.splitlines()[-1] == ("monitor off: runtime compiles not counted; 7 REQUEST-PATH COMPILES after "
                                     "warm-up timed by the request-path clock")
    data = json.loads(out.read_text())
    nulls = ("launches", "runtime_compiles", "request_path_compiles", "fallback_launches", "background_compiles",
             "swaps", "background_failures", "audit")
    assert {k: data[k] for k in nulls} == dict.fromkeys(nulls)
    assert data["request_path"]["compiles"] == 7 and data["ok"] is False
    # nothing missed: still no claim (ok null), and nothing to fail on (exit 0)
    proc = cli(["--config", "dsv4-like", "--requests", "3", "--device", "cpu", "--jit-monitor-mode", "off",
                "--json", str(out)], triton_cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1] == "monitor off: runtime compiles not counted"
    data = json.loads(out.read_text())
    assert data["ok"] is None and data["runtime_compiles"] is None and data["request_path"]["compiles"] == 0


def test_the_report_counts_the_rows_with_zero_output_tokens(triton_cache, tmp_path):
    """A row with GeneratedTokens 0 is replayed with 1 output token: the trace line and the JSON
    say how many rows were (the file's own count: 1 of 2)."""
    trace, out = tmp_path / "trace.csv", tmp_path / "report.json"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:15:46.6805900,374,0\n"
                     "2023-11-16 18:15:47.0000000,100,3\n")
    proc = cli(["--trace", str(trace), "--device", "cpu", "--json", str(out)], triton_cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert ": 2 requests (0 clipped to max_model_len, 1 with 0 output tokens given 1)\n" in proc.stdout
    data = json.loads(out.read_text())
    assert data["zero_output"] == 1 and data["requests"] == 2
    assert "--requests" not in proc.stdout  # none asked: no note


def test_requests_beyond_the_trace_are_noted(triton_cache, tmp_path):
    """--requests larger than the trace replays the whole trace, saying so under the trace line."""
    trace = tmp_path / "trace.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,4\n")
    proc = cli(["--trace", str(trace), "--device", "cpu", "--requests", "5000"], triton_cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  trace        "))
    assert ": 1 request (" in lines[at]
    assert lines[at + 1] == "               note: --requests 5000: the trace has 1 request; replaying all of them"
    proc = cli(["--trace", str(trace), "--device", "cpu", "--requests", "1"], triton_cache)
    assert proc.returncode == 0 and "note: --requests" not in proc.stdout  # as many as asked: no note


def test_warmup_none_puts_compiles_on_the_request_path(triton_cache, tmp_path):
    out = tmp_path / "none.json"
    proc = cli(["--config", "dsv4-like", "--requests", "50", "--device", "cpu", "--warmup", "none",
                "--json", str(out)], triton_cache)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["warmup"]["keys"] == 0 and data["monitor_mode"] == "warn"
    assert data["runtime_compiles"] > 0
    assert data["request_path"]["compiles"] == data["runtime_compiles"]
    assert data["request_path"]["compile_ms"] > 0 and data["request_path"]["cold_steps"] > 0
    assert data["audit"]["misses"] > 0
    # nothing was warmed on purpose: said so, never "None" as a key nor a dropped registration
    for text in (proc.stdout, proc.stderr):
        assert "no zerojit warm-up ran (--warmup none)" in text
        assert "key None" not in text and "registration" not in text and "after warm-up (" not in text
    assert all(m["no_warmup"] for k in data["audit"]["detail"]["kernels"] for m in k["misses"])


def test_warmup_none_refuses_a_process_with_compiled_kernels(triton_cache):
    run(RunOptions(config="dsv4-like", requests=5, device="cpu", progress=False))
    with pytest.raises(RunError, match="fresh process"):
        run(RunOptions(config="dsv4-like", requests=5, device="cpu", warmup="none", progress=False))


# ------------------------------------------------------------------------------ input errors
def test_malformed_trace_row_names_the_line(tmp_path):
    bad = tmp_path / "trace.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                   "2023-11-16 18:15:46.6805900,374,44\n"
                   "2023-11-16 18:15:47.0000000,lots,12\n")
    with pytest.raises(TraceError, match=r"line 3") as info:
        run(RunOptions(trace=str(bad), device="cpu", progress=False))
    assert "ContextTokens" in str(info.value)


def test_cli_reports_bad_input_with_status_2(tmp_path):
    from typer.testing import CliRunner

    from zerojit.cli import app

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"block_size": 48, "dcp_rank": 3, "dcp_size": 2, "sliding_window": 0}))
    result = CliRunner().invoke(app, ["run", "--config", str(bad), "--no-progress"])
    assert result.exit_code == 2
    text = result.output
    for name in ("block_size", "dcp_rank", "sliding_window"):
        assert name in text, text


def test_a_top_k_too_wide_for_memory_is_refused_before_warm_up(tmp_path):
    """index_topk=10^9 is a valid config (the rules are about layout, not size) but its largest
    step needs 8192 x 10^9 x 4 bytes per [tokens, index_topk] tensor: refused with the figures,
    before any warm-up, instead of failing in replay on a 1.5 TB allocation."""
    from typer.testing import CliRunner

    from zerojit.cli import app

    big = tmp_path / "big.json"
    big.write_text(json.dumps({"name": "wide", "compress_ratios": [4, 128], "block_size": 128,
                               "index_topk": 1_000_000_000, "max_num_batched_tokens": 8192}))
    result = CliRunner().invoke(app, ["run", "--config", str(big), "--device", "cpu", "--requests", "5",
                                      "--no-progress"])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "index_topk=1000000000" in text and "max_num_batched_tokens=8192" in text
    assert f"at least {4 * 8192 * 10**9 * 4 / 2**30:,.1f} GiB" in text  # K1 and K7, input and output each
    assert "GiB available on cpu" in text and "lower index_topk or max_num_batched_tokens" in text
    assert "warm-up" not in text.lower() and "Traceback" not in result.output


# ------------------------------------------------------------------------------ checks
@pytest.mark.skipif(importlib.util.find_spec("numpy") is None, reason="Triton's interpreter needs numpy")
def test_check_two_steps_in_the_interpreter(triton_cache, tmp_path):
    out = tmp_path / "check.json"
    proc = cli(["--config", "dsv4-like", "--requests", "50", "--device", "cpu", "--check", "2", "--json", str(out)],
               triton_cache)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    checks = json.loads(out.read_text())["checks"]
    assert checks["where"] == "interpreter" and len(checks["steps"]) == 2
    assert checks["ok"] and checks["outputs"] > 0


@pytest.mark.skipif(importlib.util.find_spec("numpy") is None, reason="Triton's interpreter needs numpy")
def test_a_check_child_past_its_deadline_is_killed_and_named(triton_cache, monkeypatch):
    """The --check child runs under a deadline derived from the work (check_deadline_s): one
    past it is killed, and the run fails in one line naming the child and the deadline. Here the
    deadline is cut to 0.5 s, less than the child's Python start-up with torch."""
    import time

    from zerojit.runner import engine

    monkeypatch.setattr(engine, "CHECK_CHILD_BASE_S", 0.5)
    monkeypatch.setattr(engine, "CHECK_CHILD_PER_STEP_S", 0.0)
    monkeypatch.setattr(engine, "CHECK_CHILD_PER_REPLAY_S", 0.0)
    seen = []
    real = subprocess.run
    monkeypatch.setattr(engine.subprocess, "run", lambda *a, **kw: seen.append(kw.get("timeout")) or real(*a, **kw))
    t0 = time.perf_counter()
    with pytest.raises(RunError) as info:
        engine.check_in_interpreter(RunOptions(config="dsv4-like", requests=5, device="cpu", progress=False), (0, 1))
    assert time.perf_counter() - t0 < 60  # killed, not waited for
    assert seen == [0.5]
    message = str(info.value)
    assert "\n" not in message
    assert message == ("the --check child process (TRITON_INTERPRET=1, checking 2 steps) did not finish within its "
                       "deadline of 0.5 s and was killed: check fewer steps (--check) or fewer requests (--requests)")
    # the deadline grows with the work: the steps checked and the replay's seconds
    monkeypatch.undo()
    assert engine.check_deadline_s(4, 3.0) == engine.CHECK_CHILD_BASE_S + 4 * 60.0 + 3.0 * 10.0


def test_check_steps_alternate_prefill_and_decode_steps():
    summaries = [StepSummary(i, 10 * (i + 1), i % 3 == 0, 1) for i in range(30)]
    steps = choose_check_steps(summaries, 4, seed=1, max_tokens=200)
    assert len(steps) == 4 and all(s < 20 for s in steps)
    assert sum(summaries[s].num_prefills > 0 for s in steps) == 2
    assert choose_check_steps(summaries, 4, seed=1, max_tokens=200) == steps  # deterministic


def test_random_positions_are_distinct_and_in_range():
    g = torch.Generator().manual_seed(0)
    limit = torch.tensor([1, 5, 8, 100, 3000])
    pos = random_positions(limit, 8, g)
    assert pos.dtype == torch.int32 and pos.shape == (5, 8)
    for row, n in zip(pos.tolist(), limit.tolist()):
        valid = [v for v in row if v >= 0]
        assert len(valid) == min(n, 8) and len(set(valid)) == len(valid)
        assert all(0 <= v < n for v in valid) and row[len(valid):] == [-1] * (8 - len(valid))


def test_compare_metadata_is_exact_except_compact_rows():
    a, b = StepMetadata(), StepMetadata()
    a.add("x", torch.tensor([[1, 2, -1]]))
    b.add("x", torch.tensor([[1, 2, -1]]))
    a.add("c", torch.tensor([[5, 3, -1]]), compact=True)
    b.add("c", torch.tensor([[3, 5, -1]]), compact=True)
    assert compare_metadata(a, b) == []
    a.outputs["c"] = torch.tensor([[5, -1, 3]])
    assert "compacted" in compare_metadata(a, b)[0]
    a.outputs["c"] = torch.tensor([[5, 3, -1]])
    a.outputs["x"] = torch.tensor([[1, 7, -1]])
    assert "1 element differs, first at" in compare_metadata(a, b)[0]
    assert REFERENCES.name == "reference"


# ------------------------------------------------------------------------------ GPU
@pytest.mark.gpu
def test_cuda_run_with_checks(tmp_path):
    report = run(RunOptions(config="dsv4-like", requests=60, device="cuda", check=6, progress=False,
                            fresh_triton_cache=True))
    assert report.runtime_compiles == 0 and unwarmed_hits(report) == 0
    assert report.checks is not None and report.checks.where == "cuda"
    assert len(report.checks.steps) == 6 and report.checks.ok, report.checks.mismatches
    assert report.request_path.loads == 0  # zerojit loaded every module at warm-up


def test_cli_default_warmup_chooses_workers_when_cold_and_none_when_warm(tmp_path):
    """No ``--workers`` on a fresh cache: the warm-up starts one worker per core, at most one per
    4 keys to compile (21 keys: at most 5), and the report says so and why; a second run over that
    cache restores every key (zerojit.restore), starts none and says why. Neither run prints the
    hook-replacement warning (the primer's monitor nested in the serving one)."""
    from zerojit.registry import usable_cores

    cache, out = str(tmp_path / "cache"), tmp_path / "report.json"
    runs = []
    for _ in range(2):
        proc = cli(["--config", "dsv4-like", "--requests", "30", "--device", "cpu", "--json", str(out)], cache)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "was replaced after the JIT monitor was installed" not in proc.stdout + proc.stderr
        runs.append((json.loads(out.read_text()), proc.stdout))
    (cold, cold_text), (warm, warm_text) = runs
    cores = usable_cores()
    n = min(cores, 21 // 4)
    if n >= 2:
        choice = f"{n} workers ({cores} cores, 21 keys to compile)"
        assert cold["warmup"]["stats"]["workers"] == n and cold["warmup"]["stats"]["worker_compiled"] == 21
        assert f"21 compiled by {n} worker processes, then loaded from the disk cache" in cold_text
    else:
        choice = "in this process (1 core)"
        assert cold["warmup"]["stats"]["compiled"] == 21
    assert cold["warmup"]["worker_choice"] == cold["warmup"]["stats"]["worker_choice"] == choice
    assert "zerojit: 21 keys + 20 generic variants in " in cold_text and f"(0 failures), {choice}; " in cold_text
    assert warm["warmup"]["stats"]["restored"] == 21 and warm["warmup"]["stats"]["workers"] == 0
    assert warm["warmup"]["worker_choice"] == "in this process (all 21 keys restored)"
    assert "(0 failures), in this process (all 21 keys restored); 21 restored from the disk cache by zerojit's restore " \
        "index" in warm_text
    assert cold["runtime_compiles"] == warm["runtime_compiles"] == 0
    assert cold["steps"] == warm["steps"] and cold["tokens"] == warm["tokens"]
    assert {k: v for k, v in cold["audit"].items() if k != "detail"} == {k: v for k, v in warm["audit"].items()
                                                                         if k != "detail"}


def test_cli_workers_1_compiles_in_this_process(tmp_path):
    proc = cli(["--config", "dsv4-like", "--requests", "5", "--device", "cpu", "--workers", "1", "--json",
                str(tmp_path / "r.json")], str(tmp_path / "cache"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "r.json").read_text())["warmup"]
    assert data["stats"]["compiled"] == 21 and data["stats"]["workers"] == 0
    assert data["worker_choice"] == "in this process (as asked)"
    assert "(0 failures), in this process (as asked); 21 compiled in this process" in proc.stdout


def test_the_serving_collector_freezes_start_up_and_restores_the_collector():
    import gc

    from zerojit.runner.engine import SERVING_GC_THRESHOLD, serving_collector

    before = gc.get_threshold()
    with serving_collector():
        assert gc.get_threshold() == (SERVING_GC_THRESHOLD, *before[1:])
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_replay_leaves_no_object_per_step_to_collect(triton_cache):
    """Every object the replay's start-up built is frozen before the first step, and a step keeps
    no tracked object: a 2,000-step replay ends with nearly nothing in the young generation, so
    no collection ran during it (one per 50,000 new objects would)."""
    report = run(RunOptions(config="dsv4-like", requests=500, device="cpu", progress=False))
    assert report.steps > 2000
    assert report.step_times.gc_in_steps == 0 and report.step_times.gc_between_steps == 0


def test_the_primer_is_not_part_of_the_replay_counts(monkeypatch):
    import zerojit.runner.engine as engine

    primed = []
    real = engine.primer_steps
    monkeypatch.setattr(engine, "primer_steps", lambda *a, **k: primed.append(real(*a, **k)) or primed[-1])
    with_primer = run(RunOptions(config="dsv4-like", requests=5, device="cpu", progress=False))
    monkeypatch.setattr(engine, "primer_steps", lambda *a, **k: 0)
    without = run(RunOptions(config="dsv4-like", requests=5, device="cpu", progress=False))
    assert primed == [5 * engine.PRIMER_ROUNDS] and with_primer.runtime_compiles == 0
    assert with_primer.primer_steps == 5 * engine.PRIMER_ROUNDS and with_primer.primer_seconds > 0
    assert without.primer_steps == 0
    assert with_primer.launches == without.launches > 0
    assert with_primer.audit_counts() == without.audit_counts()


@pytest.mark.parametrize("config, spec", [("dsv4-like", None), ("deepseek-v3.2", 2)], ids=["dsv4", "v3.2-spec2"])
def test_the_primer_launches_every_kernel_and_both_k4_alignments(triton_cache, config, spec):
    """The primer's decode-only, prefill-only and mixed steps reach every kernel the plan launches
    and every warmed variant a replay of the shipped slice hits (K4's aligned and unaligned
    ``seq_lens`` views, K6's causal and draft rows, K3 with drafts), under error mode."""
    import zerojit.runner.engine as engine
    from zerojit.compile_only import compile_only
    from zerojit.monitor import JitMonitor
    from zerojit.registry import JitWarmupRegistry
    from zerojit.runner.config import load_config
    from zerojit.runner.kv_cache import allocate_kv_cache
    from zerojit.runner.metadata import MetadataPlan
    from zerojit.runner.model import SparseMLAModel

    replay = run(RunOptions(config=config, requests=300, device="cpu", progress=False, num_speculative_tokens=spec))
    hit_by_replay = {(k.kernel, w.key) for k in replay.audit.kernels for w in k.warmed if w.hits}
    cfg = load_config(config, **({"num_speculative_tokens": spec} if spec else {}))
    with compile_only("cuda:90"):
        registry = JitWarmupRegistry()
        with registry.activate():
            model = SparseMLAModel(cfg, None)
            cache = allocate_kv_cache(cfg, engine.kv_blocks_per_rank(cfg, 1 << 16) * cfg.dcp_size, device="cpu")
            model.bind_kv_cache(cache)
        report = registry.warmup(cfg, progress=False)
        plan = MetadataPlan.for_cache(cfg, model.backend, cache)
        with JitMonitor("error", report=report) as monitor:
            assert engine.primer_steps(plan, torch.device("cpu"), 0, report, rounds=1) == 5
    launched = {(launch.kernel.name, repr(v.key)) for launch in monitor.snapshot().launches
                for v in report.variants if v.compiled is launch.compiled}
    assert {k for k, _ in launched} == set(plan.kernels)
    missing = {(k, key) for k, key in hit_by_replay
               if k != "compute_prefill_metadata" and (k, key) not in launched}  # K5: a tile per prefill count
    assert not missing, missing


def test_the_primer_never_compiles(triton_cache):
    """A key the warm-up did not produce makes the primer raise before compiling, in error mode,
    whatever the run's own monitor mode."""
    import zerojit.runner.engine as engine
    from zerojit.compile_only import compile_only
    from zerojit.monitor import RuntimeJitError
    from zerojit.registry import WarmupReport
    from zerojit.runner.config import load_config
    from zerojit.runner.kv_cache import allocate_kv_cache
    from zerojit.runner.metadata import MetadataPlan
    from zerojit.kernels.mla.backends import default_backend

    cfg = load_config("dsv4-like", max_model_len=4096)  # a key space no other test warmed
    with compile_only("cuda:90"):
        cache = allocate_kv_cache(cfg, engine.kv_blocks_per_rank(cfg, 1 << 14), device="cpu")
        plan = MetadataPlan.for_cache(cfg, default_backend(cfg), cache)
        with pytest.raises(RuntimeJitError):
            engine.primer_steps(plan, torch.device("cpu"), 0, WarmupReport(kernels=()), rounds=1)


def test_results_do_not_depend_on_the_serving_collector_or_allocator(monkeypatch):
    """The collector (freeze, thresholds) and the allocator's thresholds change when memory is
    reclaimed, never what a step computes: the same counts, hits and audit without them."""
    import contextlib
    import gc

    import zerojit.runner.engine as engine

    options = RunOptions(config="dsv4-like", requests=200, device="cpu", progress=False)
    tuned = run(options)
    monkeypatch.setattr(engine, "serving_collector", contextlib.nullcontext)
    monkeypatch.setattr(engine, "serving_allocator", lambda: False)
    gc.set_threshold(1)  # a collection every allocation: the other extreme
    try:
        plain = run(options)
    finally:
        gc.set_threshold(700, 10, 10)
    assert tuned.steps == plain.steps > 200 and tuned.tokens == plain.tokens and tuned.launches == plain.launches
    assert tuned.audit_counts() == plain.audit_counts()
    assert {k.kernel: k.hits for k in tuned.audit.kernels} == {k.kernel: k.hits for k in plain.audit.kernels}
    assert tuned.step_times.gc_in_steps == 0 and plain.step_times.gc_in_steps > 0


def test_step_times_name_the_slowest_step_and_the_collections():
    from zerojit.runner.engine import Replay, StepTimes

    r = Replay()
    r.step_ms = [3.0, 1.0, 1.0, 9.0] + [1.0] * 96 + [2.0]
    r.step_cpu_ms = [3.0, 1.0, 1.0, 1.5] + [1.0] * 97
    r.timed_steps = list(range(101))
    r.step_tokens = [400, 2, 2, 50] + [2] * 97
    r.step_prefills = [1, 0, 0, 0] + [0] * 96 + [1]
    r.step_decodes = [0, 1, 1, 25] + [1] * 97
    r.collections = [(0, 0.004, 3), (2, 0.1, None)]
    t = StepTimes.of(r)
    assert (t.first_ms, t.first_tokens, t.first_prefills, t.median_ms, t.max_ms) == (3.0, 400, 1, 1.0, 9.0)
    assert t.p99_ms == 3.0  # nearest rank: the 100th of 101 values
    assert (t.max_step, t.max_tokens, t.max_prefills, t.max_decodes, t.max_cpu_ms) == (3, 50, 0, 25, 1.5)
    assert t.median_prefill_ms == 2.5 and t.median_decode_ms == 1.0 and t.max_cpu_step_ms == 3.0
    assert (t.gc_in_steps, t.gc_in_steps_ms, t.gc_between_steps) == (1, 4.0, 1)
    assert (t.first_cpu_ms, t.median_cpu_ms) == (3.0, 1.0)
    first, pauses = t.summary()
    # the first-step goal's ratio: the first step against the median of the steps with prefills (3.0 and 2.0: 2.5)
    assert t.first_over_prefill_median == 1.2 and t.to_dict()["first_over_prefill_median"] == 1.2
    assert first.startswith("first 3.00 ms (a prefill step, 400 tokens) = 1.20x the median of steps with "
                            "prefills; median of all steps 1.00 ms, the first 3.0x it")
    assert "max 9.00 ms = 9.0x the median (step 3: 50 tokens, 0 prefills, 25 decodes; 1.50 ms of it on the CPU, " \
        "the rest waiting for it)" in pauses
    assert "gc 1 collection in steps (4.0 ms), 1 between" in pauses
    assert StepTimes.of(Replay()) is None
    r.step_prefills = [0] * 101  # no step with prefills: no ratio, and none printed
    assert StepTimes.of(r).first_over_prefill_median is None
    assert StepTimes.of(r).summary()[0].startswith(
        "first 3.00 ms (a decode-only step, 400 tokens); median of all steps 1.00 ms, the first 3.0x it")
    assert r.summaries[3] == StepSummary(3, 50, 0, 25)


def test_no_monitor_takes_another_for_a_replacement_with_the_process_monitor_on(caplog):
    """The process monitor (``--jit-monitor-mode`` / ``ZEROJIT_JIT_MONITOR``) installed at the end
    of warm-up, the request-path clock over it, the run's monitor, the primer's monitor: none of
    them logs that Triton's hook was replaced (each finds itself in the chain)."""
    import logging

    from zerojit import monitor

    caplog.set_level(logging.WARNING, logger="zerojit.monitor")
    monitor.configure("error")
    try:
        report = run(RunOptions(config="dsv4-like", requests=5, device="cpu", progress=False))
        assert monitor.current() is not None and monitor.current().installed
    finally:
        monitor.shutdown()
    assert report.runtime_compiles == 0 and report.primer_steps > 0
    assert [r.getMessage() for r in caplog.records if "was replaced" in r.getMessage()] == []


@pytest.mark.parametrize("config, dcp", [("dsv4-like", None), ("deepseek-v3.2", None), ("dsv4-like", (2, 1))],
                         ids=["dsv4", "v3.2", "dsv4-dcp2"])
def test_the_primer_batches_fill_as_a_gpu_step_does(config, dcp):
    """On a GPU the primer fills its steps' values (``fill=True``) from its own block ids: each
    request gets distinct blocks for its whole context, and the filled inputs point only there."""
    import zerojit.runner.engine as engine
    from zerojit.kernels.mla.backends import default_backend
    from zerojit.runner.config import load_config
    from zerojit.runner.kv_cache import allocate_kv_cache
    from zerojit.runner.metadata import MetadataPlan, build_step_inputs

    overrides = dict(dcp_size=dcp[0], dcp_rank=dcp[1]) if dcp else {}
    cfg = load_config(config, **overrides)
    cache = allocate_kv_cache(cfg, engine.kv_blocks_per_rank(cfg, 1 << 16) * cfg.dcp_size, device="cpu")
    plan = MetadataPlan.for_cache(cfg, default_backend(cfg), cache)
    kinds = [(b.num_decodes, b.num_prefills) for b in engine.primer_batches(cfg)]
    decodes = min(cfg.max_num_seqs, cfg.max_num_batched_tokens // cfg.query_len)
    assert kinds == [(1, 0), (0, 1), (1, 1), (0, 1), (decodes, 0)]
    assert max(b.num_tokens for b in engine.primer_batches(cfg)) == cfg.max_num_batched_tokens  # the largest step
    for batch in engine.primer_batches(cfg):
        blocks = engine._primer_blocks(batch, plan)
        ids = [i for b in blocks for i in b]
        assert 0 not in ids and len(set(ids)) == len(ids)
        per_block = cfg.block_size * cfg.dcp_size
        assert [len(b) for b in blocks] == [-(-s // per_block) for s in batch.seq_lens]
        inputs = build_step_inputs(batch, plan, blocks=blocks, fill=True, seed=0, device="cpu")
        assert inputs.filled and inputs.num_tokens == batch.num_tokens
        assert set(inputs.block_table.unique().tolist()) <= {0, *ids}
