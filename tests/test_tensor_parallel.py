"""A tensor-parallel group of runner ranks (gloo, CPU processes, compile-only cuda:90):
``benchmarks/tensor_parallel.py`` over 2 ranks, both phases, 60 requests of the shipped trace.

References: the sums each all-reduce must give, computed here from the step indices
(``sum(rank + step)`` over the ranks); the runner's own report (its steps and median step, its
cut list); the number of keys and kernels the dsv4-like key space has; the learned-keys file
the ranks share, read here line by line.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RANKS = 2
#: The dsv4-like key space (tests/test_distributed_warmup.py) and the runner's kernels, one cut each.
KEYS, KERNELS = 21, 7


@pytest.fixture(scope="module")
def phases(tmp_path_factory) -> dict:
    """Both phases of the benchmark, rank 1 missing, in one subprocess; its ``--json`` results."""
    tmp = tmp_path_factory.mktemp("tensor-parallel")
    out = tmp / "tp.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TRITON_HOME": str(tmp / "home")}
    for name in ("TRITON_INTERPRET", "TRITON_CACHE_DIR", "ZEROJIT_JIT_MONITOR"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tensor_parallel.py"), "--ranks", str(RANKS),
                           "--miss-rank", "1", "--requests", "60", "--device", "cpu", "--workers", "1",
                           "--json", str(out), "--folder", str(tmp / "group")], env=env, capture_output=True, text=True, timeout=300)
    assert out.exists(), done.stdout + done.stderr
    data = json.loads(out.read_text())
    data["exit"], data["stdout"] = done.returncode, done.stdout
    return data


def all_reduced_every_step(rank: dict) -> None:
    """One all-reduce after every step, in step order, each giving the sum over the ranks."""
    assert rank["step_indices"] == list(range(rank["steps"])) and rank["steps"] > 60
    assert rank["sums"] == [sum(r + step for r in range(RANKS)) for step in rank["step_indices"]]
    assert rank["barriers"] == 1
    # the hook gets each step's own time (the report's), the all-reduce timed apart
    assert statistics.median(rank["step_ms"]) == pytest.approx(rank["report_median_step_ms"])
    assert len(rank["wait_ms"]) == rank["steps"]


def test_a_group_warm_up_then_every_rank_replays_with_zero_runtime_compiles(phases):
    ranks = phases["results"]["replay"]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and {r["backend"] for r in ranks} == {"gloo"}
    for r in ranks:
        assert r["monitor_mode"] == "error" and r["runtime_compiles"] == 0 and r["ok"]
        assert r["warmup_keys"] == KEYS and r["cut"] == []
        all_reduced_every_step(r)
    # the warm-up is sharded: each key compiled once, by one of the two ranks
    assert sum(r["warmup_compiled"] for r in ranks) == KEYS and all(0 < r["warmup_compiled"] < KEYS for r in ranks)
    assert ranks[0]["steps"] == ranks[1]["steps"]


def test_a_miss_on_one_rank_swaps_there_only_and_is_learned_once(phases):
    miss = phases["results"]["miss"]
    rank0, rank1 = miss["ranks"]
    for r in (rank0, rank1):
        assert r["monitor_mode"] == "fallback" and r["request_path_compiles"] == 0 and r["ok"]
        all_reduced_every_step(r)
    # rank 0 missed nothing
    assert rank0["cut"] == [] and rank0["fallback_launches"] == rank0["runtime_compiles"] == 0
    assert rank0["background_compiles"] == rank0["swaps"] == 0
    # rank 1: one key cut per kernel, each served by a generic variant, compiled and swapped in
    assert len(rank1["cut"]) == KERNELS and len({c.split(":")[0] for c in rank1["cut"]}) == KERNELS
    assert rank1["fallback_launches"] >= KERNELS
    assert rank1["background_compiles"] == rank1["swaps"] == KERNELS and rank1["background_idle"] is True
    # the learned-keys file the ranks share: one line per cut key, each appended by rank 1 alone
    path = Path(rank1["learned_file"])
    assert path.parent.parent.name == "cache" and rank0["learned_file"] == str(path)
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    assert sorted(line["kernel"] for line in lines) == sorted(c.split(":")[0] for c in rank1["cut"])
    assert [rank0["learned_appends"], rank1["learned_appends"]] == [0, KERNELS]
    assert miss["learned_lines"] == miss["learned_keys"] == KERNELS


def test_the_report_names_every_goal(phases):
    text = phases["stdout"]
    assert phases["exit"] == 0, text  # the count goals met (the wait ratio is a GPU goal: reported only)
    assert "met    0 runtime compiles on every rank" in text
    assert "met    rank 1 missed (cut 7 keys) and swapped them in; swaps on ranks [1]" in text
    assert "met    each cut key learned once: 7 lines, 7 keys in the shared file; appends by rank [0, 7]" in text
    assert "collective wait <= 2x the median step (GPU goal" in text
    assert "MISSED" not in text and text.count("not judged on cpu (shared cores, dry steps)") == 2  # both phases


def test_learning_the_cut_needs_a_cut_and_a_group_needs_a_zerojit_warm_up():
    from zerojit.runner.engine import RunError, RunOptions, run

    with pytest.raises(RunError, match=r"learn_cut=True needs cut_keyspace=True"):
        RunOptions(device="cpu", learn_cut=True)
    assert RunOptions(device="cpu", cut_keyspace=True, learn_cut=True).learn_cut
    with pytest.raises(RunError, match=r"group= shards the zerojit warm-up; warmup='none' has none to shard"):
        run(RunOptions(device="cpu", warmup="none"), group=object())


@pytest.mark.parametrize("flags, env, message", [
    (["--requests", "0"], {}, "invalid run options: requests=0: must be >= 1"),
    (["--timeout", "0"], {}, "--timeout 0.0: must be > 0 seconds"),
    (["--config", "no-such-config"], {}, "invalid config name: unknown config 'no-such-config'"),
    (["--json", "/no-such-folder/tp.json"], {}, "--json /no-such-folder/tp.json: cannot write there: "),
    ([], {"ZEROJIT_WORKER_NICE": "abc"}, "ZEROJIT_WORKER_NICE='abc': use a whole number from 0 to 19"),
])
def test_bad_input_exits_2_with_one_line_before_any_rank_starts(flags, env, message):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **env}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tensor_parallel.py"), "--device", "cpu", *flags],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"tensor_parallel.py: error: {message}")
