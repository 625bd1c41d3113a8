"""The reference runner with a cut key space in fallback mode, beside an uncut run (issue 29).

Each round runs ``zerojit run`` twice, in fresh processes sharing one Triton cache folder (the
first warm-up fills it; the cut happens after warm-up, so both runs warm alike):

* ``uncut``: ``zerojit run --device D --jit-monitor-mode MODE``;
* ``cut``: the same with ``--cut-keyspace`` (benchmark-only, hidden; docs/cli.md): after the
  primer, each kernel's first specialized warmed variant is dropped from Triton's in-process
  cache (``engine.cut_keyspace``), so the trace's first launch of that key misses as a key warmed
  without that value class would. In fallback mode the group's generic variant serves it, the
  key compiles in a background worker and is swapped in between steps.

The two runs of a round alternate which goes first (interleaved rounds; medians and the spread,
min-max, over rounds). Printed per run kind: the counts (request-path compiles, fallback launches,
background compiles, swaps, runtime compiles), the checks, and the step times; then the cut run's
ratios to the uncut run of the same round: the slowest step, and each step kind's median
(decode-only steps, steps with prefills). Goals (GPU): 0 request-path compiles, slowest step
<= 1.1x, each kind's median within 5%, ``--check`` passing (outputs equal to the references).

On ``--device cpu`` the runs are compile-only (``--target``, dry launches: nothing executes, so
the step times are the CPU's dispatch cost and ``--check`` is off unless asked): the counts are
the figure there (the fallback path works end to end without a GPU).

Usage::

    PYTHONPATH=src python benchmarks/fallback_runner.py [--device cuda|cpu] [--rounds 3]
        [--requests N] [--mode fallback] [--check N] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

KINDS = ("uncut", "cut")
COUNTS = ("request_path_compiles", "fallback_launches", "background_compiles", "swaps", "runtime_compiles")


def one_run(kind: str, args: argparse.Namespace, cache: str, folder: str) -> dict:
    """One ``zerojit run`` in a fresh process; its ``--json`` report, and its exit status and seconds."""
    out = os.path.join(folder, f"{kind}-{time.monotonic_ns()}.json")
    cmd = [sys.executable, "-m", "zerojit", "run", "--device", args.device, "--no-progress", "--json", out,
           "--jit-monitor-mode", args.mode, "--requests", str(args.requests)]
    if args.check is not None:
        cmd += ["--check", str(args.check)]
    if kind == "cut":
        cmd.append("--cut-keyspace")
    # ZEROJIT_LEARN=0: the cut run's misses are not recorded as learned keys in the shared cache
    # folder, so every run warms the declared key space alone
    env = dict(os.environ, TRITON_CACHE_DIR=cache, ZEROJIT_LEARN="0")
    env.pop("ZEROJIT_JIT_MONITOR", None)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"kind": kind, "exit": None, "error": f"no report after {args.timeout} s"}
    seconds = time.perf_counter() - t0
    if not os.path.exists(out):
        return {"kind": kind, "exit": proc.returncode, "seconds": seconds,
                "error": (proc.stderr.strip().splitlines() or ["no report"])[-1]}
    with open(out) as f:
        report = json.load(f)
    st = report["step_times"] or {}
    checks = report["checks"]
    return {
        "kind": kind, "exit": proc.returncode, "seconds": seconds,
        **{k: report.get(k) for k in COUNTS}, "background_idle": report.get("background_idle"),
        "cut": len(report.get("cut_keyspace", [])), "steps": report["steps"],
        "checks": None if checks is None else {"steps": len(checks["steps"]), "ok": not checks["mismatches"]},
        "max_ms": st.get("max_ms"), "max_step": st.get("max_step"), "median_ms": st.get("median_ms"),
        "median_decode_ms": st.get("median_decode_ms"), "median_prefill_ms": st.get("median_prefill_ms"),
        "first_ms": st.get("first_ms"),
    }


def spread(values: list[float]) -> str:
    """``median (min-max)`` of ``values``."""
    if not values:
        return "n/a"
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (one cut and one uncut run each)")
    parser.add_argument("--requests", type=int, default=1000, help="requests of the shipped trace replayed per run")
    parser.add_argument("--mode", default="fallback", choices=("off", "warn", "error", "fallback"),
                        help="--jit-monitor-mode of both runs (default fallback)")
    parser.add_argument("--check", type=int, default=None, help="--check N (default: the runner's: 8 on cuda, 0 on cpu)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds one run may take")
    parser.add_argument("--json", help="also write every run and the summary here")
    args = parser.parse_args()
    # each refused before the first run: else every run failed alike, or the write after all of them
    for flag, value, low in (("--rounds", args.rounds, 1), ("--requests", args.requests, 1),
                             ("--check", args.check if args.check is not None else 0, 0)):
        if value < low:
            parser.error(f"{flag} must be >= {low}, got {value}")
    if not args.timeout > 0:
        parser.error(f"--timeout must be > 0 seconds, got {args.timeout:g}")
    from zerojit.outputs import output_problem, write_output

    if args.json and (problem := output_problem(args.json)):
        parser.error(f"--json {args.json}: cannot write there: {problem}")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("fallback_runner.py: --device cuda needs a CUDA GPU (none is visible); --device cpu runs the "
                  "same compile-only", file=sys.stderr)
            sys.exit(2)

    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="fallback-runner-") as folder:
        cache = os.path.join(folder, "triton-cache")
        for r in range(args.rounds):
            for kind in (KINDS if r % 2 == 0 else KINDS[::-1]):  # alternate which goes first
                row = one_run(kind, args, cache, folder)
                row["round"] = r
                runs.append(row)
                print(f"round {r} {kind:<5}: " + (row["error"] if "error" in row else
                      f"exit {row['exit']}, {row['seconds']:.1f} s, " + ", ".join(f"{k} {row[k]}" for k in COUNTS)),
                      flush=True)

    print(f"\nzerojit run --device {args.device} --jit-monitor-mode {args.mode} --requests {args.requests}: "
          f"{args.rounds} rounds, medians (min-max)")
    widths = (9, 12, 8, 6, 8, 4)
    print(f"{'run':<6}" + "".join(f"{h:>{w}}" for h, w in zip(("req-path", "fallback", "backgr.", "swaps", "runtime",
                                                                 "cut"), widths))
          + f"{'checks':>9}{'max step ms':>24}{'decode median ms':>24}{'prefill median ms':>24}")
    summary: dict = {"device": args.device, "mode": args.mode, "requests": args.requests, "rounds": args.rounds}
    for kind in KINDS:
        mine = [r for r in runs if r["kind"] == kind and "error" not in r]
        if not mine:
            print(f"{kind:<6} every run failed")
            continue
        counts = {k: sorted({r[k] for r in mine}) for k in (*COUNTS, "cut")}
        checks = [r["checks"] for r in mine if r["checks"] is not None]
        ok = "n/a" if not checks else ("equal" if all(c["ok"] for c in checks) else "MISMATCH")
        print(f"{kind:<6}" + "".join(" " + f"{'/'.join(map(str, counts[k])):>{w - 1}}" for k, w in
                                     zip((*COUNTS, "cut"), widths))
              + f"{ok:>9}" + "".join(f"{spread([r[f] for r in mine if r[f] is not None]):>24}"
                                     for f in ("max_ms", "median_decode_ms", "median_prefill_ms")))
        summary[kind] = {"counts": counts, "checks": ok}

    # the cut run's ratios to the uncut run of the same round
    ratios: dict[str, list[float]] = {f: [] for f in ("max_ms", "median_decode_ms", "median_prefill_ms")}
    for r in range(args.rounds):
        pair = {row["kind"]: row for row in runs if row["round"] == r and "error" not in row}
        if len(pair) < 2:
            continue
        for f in ratios:
            if pair["cut"][f] and pair["uncut"][f]:
                ratios[f].append(pair["cut"][f] / pair["uncut"][f])
    goals = {"max_ms": ("slowest step", 1.10), "median_decode_ms": ("decode-only median", 1.05),
             "median_prefill_ms": ("with-prefills median", 1.05)}
    print("\ncut / uncut (same round)      median (min-max)            goal     met")
    for f, (what, goal) in goals.items():
        vals = ratios[f]
        met = "n/a" if not vals else ("yes" if statistics.median(vals) <= goal else "NO")
        print(f"  {what:<26}{spread(vals):>26}{'<= ' + format(goal, '.2f') + 'x':>12}{met:>8}")
        summary[f"ratio_{f}"] = vals
    cut_rows = [r for r in runs if r["kind"] == "cut" and "error" not in r]
    if args.mode == "fallback" and cut_rows:
        zero = all(r["request_path_compiles"] == 0 for r in cut_rows)
        print(f"  request-path compiles in the cut runs: {'0 (goal met)' if zero else 'SOME (goal missed)'}")
    if args.json:
        write_output(args.json, json.dumps({"summary": summary, "runs": runs}, indent=2))
    sys.exit(1 if any("error" in r for r in runs) else 0)  # a run that gave no report fails the benchmark


if __name__ == "__main__":
    main()
