"""Step times of ``zerojit run`` on CPU (dry launches): the first step, the median, the pauses.

Two modes, each in a fresh process per round, rounds interleaved (``--rounds``, default 3):

* ``serving``: ``zerojit run`` as it ships: the primer as start-up's last act, the collector
  frozen after start-up (``serving_collector``), glibc's malloc thresholds raised for the loop
  (``serving_allocator``);
* ``libc-default``: the same with glibc's own malloc thresholds (``serving_allocator`` left out),
  to show what the allocator costs a dry step.

Each run replays ``--requests`` requests of ``--trace`` (default: the shared Azure trace when it
is there, else the shipped 2,000-request slice) and reports, from the run's own ``StepTimes``:
first step, median, p99, max and max/median, the first step against the median of the steps
with prefills (``first_over_prefill_median``, the first-step goal), the slowest step's CPU time
(far below its wall time: the step waited for the CPU, another process ran), the largest CPU
time of any step, and Python's collections inside steps. Printed per mode: the median over the rounds and the spread
(min-max).

``--passes K`` replays the trace K times in each process (the run's replay, then K - 1 more,
without the primer) and reports, per step, the least wall and the least CPU time over the
passes: a wait for the CPU seldom hits the same step twice, so their max is the slowest step's
own cost.

``--window A-B`` (e.g. ``2493-2497``) also times the steps A..B of the trace's schedule in each
mode's process: their batches built once, then run one after the other ``--window-rounds``
times (default 30) after warm-up and the primer; printed: each step's median milliseconds. The
window around an 8,192-token prefill shows the allocator's cost on the steps near it.

Usage: ``PYTHONPATH=src python benchmarks/step_pauses.py [--requests 12000] [--rounds 3]
[--passes 2] [--window 2493-2497] [--timeout 1800] [--json OUT]``; each process has a deadline
(``--timeout`` seconds). On a shared machine the max moves with the other load:
repeat, and read ``max_cpu_ms`` beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

MODES = ("serving", "libc-default")
SHARED_TRACE = Path(__file__).resolve().parents[2] / "shared" / "data" / "azure_llm_trace_conv_2023.csv"


def least_over_passes(replays: list) -> dict:
    """Per step, the least wall and the least CPU milliseconds over the passes (a wait for the
    CPU seldom hits the same step twice): their median, p99 and max, and the max's step."""
    out = {}
    for name, attr in (("wall", "step_ms"), ("cpu", "step_cpu_ms")):
        least = [min(v) for v in zip(*(getattr(r, attr) for r in replays))]
        ordered = sorted(least)
        i = max(range(len(least)), key=least.__getitem__)
        r = replays[0]
        out[name] = {"median_ms": statistics.median(least), "p99_ms": ordered[int(0.99 * len(ordered))],
                     "max_ms": ordered[-1], "max_step": r.timed_steps[i], "max_tokens": r.step_tokens[r.timed_steps[i]],
                     "max_prefills": r.step_prefills[r.timed_steps[i]]}
    return out


def child(mode: str, trace: str | None, requests: int | None, window: tuple[int, int] | None,
          window_rounds: int, passes: int) -> dict:
    import time

    import torch

    from zerojit.runner import engine

    if mode == "libc-default":
        engine.serving_allocator = lambda: False
    replays: list = []
    replay_trace = engine.replay_trace

    def replay_passes(*args, **kwargs):  # the run's own replay, then the same again (no primer)
        replays.append(replay_trace(*args, **kwargs))
        kwargs.pop("prime", None)
        replays.extend(replay_trace(*args, **kwargs) for _ in range(passes - 1))
        return replays[0]

    engine.replay_trace = replay_passes
    report = engine.run(engine.RunOptions(trace=trace, requests=requests, device="cpu", progress=False))
    engine.replay_trace = replay_trace
    out = {"steps": report.steps, "tokens": report.tokens, "step_times": report.step_times.to_dict()}
    if passes > 1:
        out["least"] = least_over_passes(replays)
    if window is None:
        return out
    from zerojit.compile_only import compile_only
    from zerojit.monitor import JitMonitor
    from zerojit.registry import JitWarmupRegistry
    from zerojit.runner.config import load_config
    from zerojit.runner.kv_cache import allocate_kv_cache
    from zerojit.runner.metadata import KERNELS, DecodeBuffers, MetadataPlan, build_step_inputs, step_metadata
    from zerojit.runner.model import SparseMLAModel

    options = engine.RunOptions(trace=trace, requests=requests, device="cpu", progress=False)
    config = load_config(options.config)
    blocks = engine.kv_blocks_per_rank(config, options.kv_cache_tokens)
    scheduler, _ = engine.make_scheduler(engine._load_trace(options, config), config, num_blocks=blocks,
                                         step_interval_s=options.step_interval_s)
    batches = []
    for batch in scheduler:
        if batch.step >= window[0]:
            batches.append(batch)
        if batch.step >= window[1]:
            break
    cpu = torch.device("cpu")
    with compile_only(options.target):
        registry = JitWarmupRegistry()
        with registry.activate():
            model = SparseMLAModel(config, None)
            cache = allocate_kv_cache(config, blocks * config.dcp_size, device=cpu)
            model.bind_kv_cache(cache)
        warm = registry.warmup(config, progress=False)
        plan = MetadataPlan.for_cache(config, model.backend, cache)
        if mode != "libc-default":
            engine.serving_allocator()
        buffers = DecodeBuffers.allocate(plan, device=cpu)
        times: dict[int, list[float]] = {b.step: [] for b in batches}
        with JitMonitor("error", report=warm):
            engine.primer_steps(plan, cpu, 0, warm)
            for _ in range(window_rounds):
                for b in batches:
                    t0 = time.perf_counter()
                    step_metadata(build_step_inputs(b, plan, fill=False, device=cpu), plan, KERNELS, buffers)
                    times[b.step].append((time.perf_counter() - t0) * 1e3)
    out["window"] = [{"step": b.step, "tokens": b.num_tokens, "prefills": b.num_prefills, "decodes": b.num_decodes,
                      "median_ms": statistics.median(times[b.step])} for b in batches]
    return out


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):7.3f} ({min(values):.3f}-{max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", default=str(SHARED_TRACE) if SHARED_TRACE.exists() else None)
    parser.add_argument("--requests", type=int, default=12000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--passes", type=int, default=1, help="replays of the trace in each process (least per step)")
    parser.add_argument("--window", default=None, help="steps A-B to time one after the other")
    parser.add_argument("--window-rounds", type=int, default=30)
    parser.add_argument("--json", default=None)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds one process may take (default 1800)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    # each refused before the first process (else a child's traceback, or the write after every round)
    for flag, value in (("--rounds", args.rounds), ("--requests", args.requests), ("--passes", args.passes),
                        ("--window-rounds", args.window_rounds)):
        if value < 1:
            parser.error(f"{flag} must be >= 1, got {value}")
    if not args.timeout > 0:
        parser.error(f"--timeout must be > 0 seconds, got {args.timeout:g}")
    try:
        window = tuple(int(x) for x in args.window.split("-")) if args.window else None
    except ValueError:
        window = ()
    if window is not None and (len(window) != 2 or not 0 <= window[0] <= window[1]):
        parser.error(f"--window {args.window}: write A-B, steps 0 <= A <= B")
    if args.trace and not os.path.isfile(args.trace):
        parser.error(f"--trace {args.trace}: no such file")
    from zerojit.outputs import output_problem, write_output

    if args.json and (problem := output_problem(args.json)):
        parser.error(f"--json {args.json}: cannot write there: {problem}")
    if args.child:
        print(json.dumps(child(args.child, args.trace, args.requests, window, args.window_rounds, args.passes)))
        return
    results: dict[str, list[dict]] = {m: [] for m in MODES}
    for r in range(args.rounds):
        for mode in MODES:
            cmd = [sys.executable, __file__, "--child", mode, "--requests", str(args.requests),
                   "--window-rounds", str(args.window_rounds), "--passes", str(args.passes)]
            cmd += ["--trace", args.trace] if args.trace else []
            cmd += ["--window", args.window] if args.window else []
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ), timeout=args.timeout)
            except subprocess.TimeoutExpired:
                raise SystemExit(f"{mode}: no result after {args.timeout:g} s (--timeout)") from None
            if proc.returncode != 0:
                raise SystemExit(f"{mode} failed:\n{proc.stderr[-3000:]}")
            results[mode].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            t = results[mode][-1]["step_times"]
            print(f"round {r + 1} {mode:<13} steps {t['steps']} median {t['median_ms']:.3f} p99 {t['p99_ms']:.3f} "
                  f"max {t['max_ms']:.3f} ({t['max_ms'] / t['median_ms']:.1f}x, CPU {t['max_cpu_ms']:.3f}) "
                  f"first {t['first_ms']:.3f} gc in steps {t['gc_in_steps']}", flush=True)
    trace = args.trace or "the shipped slice"
    print(f"\n{trace}, {args.requests} requests; medians over {args.rounds} rounds (min-max), milliseconds")
    fields = [("first", "first_ms"), ("median", "median_ms"), ("p99", "p99_ms"), ("max", "max_ms"),
              ("slowest step's CPU", "max_cpu_ms"), ("most CPU of a step", "max_cpu_step_ms")]
    print(f"{'':22}" + "".join(f"{m:>26}" for m in MODES))
    for label, key in fields:
        print(f"{label:22}" + "".join(f"{spread([x['step_times'][key] for x in results[m]]):>26}" for m in MODES))
    for label, key in (("max / median", "max_ms"), ("first / median", "first_ms")):
        print(f"{label:22}" + "".join(
            f"{spread([x['step_times'][key] / x['step_times']['median_ms'] for x in results[m]]):>26}" for m in MODES))
    print(f"{'first / prefill median':22}" + "".join(  # the first-step goal's ratio (issue 33: <= 3x)
        f"{spread([x['step_times']['first_over_prefill_median'] for x in results[m]]):>26}" for m in MODES))
    print(f"{'gc in steps':22}" + "".join(f"{spread([x['step_times']['gc_in_steps'] for x in results[m]]):>26}"
                                          for m in MODES))
    if args.passes > 1:
        print(f"\nper step, the least over {args.passes} passes in one process (waits for the CPU removed)")
        for what in ("wall", "cpu"):
            for m in MODES:
                least = [x["least"][what] for x in results[m]]
                print(f"  {what:4} {m:<13} median {spread([x['median_ms'] for x in least])} p99 "
                      f"{spread([x['p99_ms'] for x in least])} max {spread([x['max_ms'] for x in least])} max/median "
                      f"{spread([x['max_ms'] / x['median_ms'] for x in least])}; slowest: "
                      + ", ".join(f"step {x['max_step']} ({x['max_tokens']} tokens, {x['max_prefills']} prefills)"
                                  for x in least))
    if window:
        print(f"\nsteps {args.window} one after the other, {args.window_rounds} rounds: median ms (over processes)")
        for i, w in enumerate(results[MODES[0]][0]["window"]):
            print(f"  step {w['step']:6d} ({w['tokens']:5d} tokens, {w['prefills']} prefills, {w['decodes']:3d} decodes)"
                  + "".join(f"  {m}: {spread([x['window'][i]['median_ms'] for x in results[m]])}" for m in MODES))
    if args.json:
        write_output(args.json, json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
