"""A miss on one rank of a tensor-parallel group, served in fallback mode, stalls no rank (issue 34).

``--ranks N`` processes (``torch.multiprocessing`` spawn; NCCL with one GPU per rank when there
are N GPUs, else gloo with the runner on ``--device cpu``: compile-only ``--target``, dry
launches) each run the reference runner (``zerojit.runner.engine.run``) over the shipped trace
with the same config, as the ranks of one tensor-parallel group on one host: one Triton cache
folder for all (``TRITON_CACHE_DIR``), the warm-up sharded across the group (``run(group=)``), a
barrier before the first step (``run(before_first_step=)``) and an all-reduce of one int64 after
every step (``run(after_step=)``, outside the step's time). Each rank all-reduces ``rank + step``,
so every sum is checked against ``N * (N - 1) / 2 + N * step``: a rank one step behind or ahead
gives another sum. A rank's *collective wait* is its time inside the all-reduce (on a GPU to the
value read back), the wait for the slowest rank included: a rank that compiles inside a step
makes every other rank wait that long (vLLM 45198, 47249; SGLang 24588).

Phases, each in fresh processes, in this order, on one cache folder:

* ``replay``: the folder cold: the group's warm-up (each rank compiles its share, then loads
  all) and the replay in error mode: 0 runtime compiles on every rank.
* ``miss``: fallback mode; rank ``--miss-rank``'s key space is cut (``RunOptions.cut_keyspace``:
  after the primer, one specialized warmed variant per kernel dropped from that rank's
  in-process cache, so its trace misses there; ``learn_cut``: the misses are learned as a real
  miss's would be). Goals: no step's collective wait above 2x the median step on any rank; the
  swaps on the miss rank only, with 0 request-path compiles; each cut key recorded once in the
  learned-keys file the ranks share, appended by the miss rank only.

Printed per phase and rank: steps, the median step, the slowest collective wait (its step, its
ratio to the median step), the serving counts (request-path compiles, fallback launches,
background compiles, swaps, runtime compiles), keys cut, learned-key appends, the all-reduces
that gave the right sum; then the goals. Exit status 1 when a rank failed, an all-reduce gave a
wrong sum, or a count goal was missed (the wait ratio is a GPU goal, reported only); 2, with one
line, for invalid input (flags, the config, a bad ``ZEROJIT_WORKER_START``/``ZEROJIT_WORKER_NICE``,
an unwritable ``--json``), refused before any rank starts.

On CPU (gloo, dry launches) a step is the CPU's dispatch cost (about 0.2 ms) and gloo's round trip
is of that order, with every rank, its compile worker and the background compiler sharing the
cores: the counts and the sums are the figure there, the wait ratio is the GPU's.
``--check`` is 0 (a checked step's reference work would run between the step and the all-reduce
of one rank only); ``benchmarks/fallback_runner.py`` checks fallback outputs.

Usage::

    PYTHONPATH=src python benchmarks/tensor_parallel.py [--ranks 2] [--miss-rank 1] [--requests N]
        [--phases replay miss] [--device auto|cuda|cpu] [--json OUT] [--folder DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import tempfile
from datetime import timedelta

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from distributed_warmup import NO_MULTICAST  # noqa: E402  (NVLink multicast off: the device notes)

PHASES = ("replay", "miss")
COUNTS = ("request_path_compiles", "fallback_launches", "background_compiles", "swaps", "runtime_compiles")
#: The goal: no step's collective wait above this many median steps.
WAIT_GOAL = 2.0


def expected_sum(ranks: int, step: int) -> int:
    """The all-reduce of ``rank + step`` over ``ranks`` ranks at ``step``."""
    return ranks * (ranks - 1) // 2 + ranks * step


def _rank(rank: int, args: argparse.Namespace, phase: str, root: str) -> None:
    """One rank of ``phase``: the runner with the group's hooks; its results to ``root/PHASE-rankR.json``."""
    os.environ.update(NO_MULTICAST)  # (inherited from main too; set here before the group starts)
    os.environ["TRITON_CACHE_DIR"] = os.path.join(root, "cache")
    import time

    import torch
    import torch.distributed as dist

    from zerojit import learned
    from zerojit.runner.engine import RunOptions, run

    gpu = args.device == "cuda"
    if gpu:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if gpu else "gloo", init_method=f"file://{root}/init-{phase}", rank=rank,
                            world_size=args.ranks, timeout=timedelta(seconds=args.timeout))
    appends = [0]  # this rank's appends to the learned-keys file (record_miss's True)
    record_miss = learned.record_miss

    def counted(*a, **kw):
        appended = record_miss(*a, **kw)
        appends[0] += bool(appended)
        return appended

    learned.record_miss = counted  # the monitor and the fallback call it through the module
    buf = torch.zeros(1, dtype=torch.int64, device=f"cuda:{rank}" if gpu else "cpu")
    steps, step_ms, waits, sums = [], [], [], []

    def after_step(step: int, ms: float) -> None:
        buf.fill_(rank + step)
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        total = int(buf.item())  # on a GPU: waits for the collective
        waits.append((time.perf_counter() - t0) * 1e3)
        steps.append(step)
        step_ms.append(ms)
        sums.append(total)

    ready = [0]

    def before_first_step() -> None:
        ready[0] += 1
        dist.barrier()  # the ranks' start-ups end apart: the first all-reduce must not wait for that

    cut = phase == "miss" and rank == args.miss_rank
    options = RunOptions(config=args.config, requests=args.requests, device=args.device, target=args.target,
                         jit_monitor_mode="error" if phase == "replay" else "fallback", check=0, progress=False,
                         workers=args.workers, cut_keyspace=cut, learn_cut=cut)
    report = run(options, group=dist.group.WORLD, before_first_step=before_first_step, after_step=after_step)
    learned.flush()
    stats = report.warmup.report.stats
    slowest = max(range(len(waits)), key=waits.__getitem__) if waits else None
    median = statistics.median(step_ms) if step_ms else 0.0
    out = {
        "rank": rank, "phase": phase, "device": report.device, "target": report.target,
        "backend": "nccl" if gpu else "gloo", "monitor_mode": report.monitor_mode, "steps": report.steps,
        **{k: getattr(report, k) for k in COUNTS}, "background_idle": report.background_idle, "cut": list(report.cut),
        "warmup_seconds": report.warmup.seconds, "warmup_keys": report.warmup.keys,
        "warmup_compiled": (stats.compiled + stats.worker_compiled) if stats is not None else None,
        "learned_file": report.warmup.report.learned_file, "learned_appends": appends[0],
        "median_step_ms": median, "report_median_step_ms": report.median_step_ms, "barriers": ready[0], "max_wait_ms": waits[slowest] if waits else None,
        "max_wait_step": steps[slowest] if waits else None,
        "wait_ratio": waits[slowest] / median if waits and median else None,
        "p99_wait_ms": sorted(waits)[max(math.ceil(0.99 * len(waits)) - 1, 0)] if waits else None,
        "step_indices": steps, "step_ms": step_ms, "wait_ms": waits, "sums": sums, "ok": report.ok,
    }
    with open(os.path.join(root, f"{phase}-rank{rank}.json"), "w") as f:
        json.dump(out, f)
    dist.destroy_process_group()


def learned_lines(path: str | None) -> tuple[int, int]:
    """(lines, distinct records) of the learned-keys file at ``path`` (0, 0: none)."""
    if not path or not os.path.exists(path):
        return 0, 0
    from zerojit.learned import read_learned

    with open(path) as f:
        lines = sum(1 for line in f if line.strip())
    return lines, len(read_learned(path)[0])


def run_phase(args: argparse.Namespace, phase: str, root: str) -> list[dict]:
    """Every rank of ``phase`` (fresh processes); their results by rank."""
    import torch.multiprocessing as mp

    mp.spawn(_rank, args=(args, phase, root), nprocs=args.ranks, join=True)
    ranks = []
    for r in range(args.ranks):
        with open(os.path.join(root, f"{phase}-rank{r}.json")) as f:
            ranks.append(json.load(f))
    return ranks


def goals(args: argparse.Namespace, phase: str, ranks: list[dict], learned: tuple[int, int]) -> list[tuple[str, bool]]:
    """``phase``'s goals as ``(what, met)``; the first is the wait ratio (a GPU goal)."""
    worst = max((r["wait_ratio"] or 0.0) for r in ranks)
    out = [(f"every step's collective wait <= {WAIT_GOAL:.0f}x the median step (GPU goal; worst {worst:.2f}x)",
            worst <= WAIT_GOAL),
           ("every all-reduce summed rank + step over the ranks", all(sum_ok(args, r) for r in ranks))]
    if phase == "replay":
        compiled = [r["warmup_compiled"] for r in ranks]
        out += [("0 runtime compiles on every rank", all(r["runtime_compiles"] == 0 for r in ranks)),
                (f"the warm-up sharded: compiles per rank {compiled}, {ranks[0]['warmup_keys']} keys",
                 sum(c or 0 for c in compiled) >= ranks[0]["warmup_keys"] and all(c < ranks[0]["warmup_keys"]
                                                                                  for c in compiled if c is not None))]
    else:
        miss = ranks[args.miss_rank]
        others = [r for r in ranks if r["rank"] != args.miss_rank]
        cut = len(miss["cut"])
        swapped = [r["rank"] for r in ranks if r["swaps"]]
        lines, distinct = learned
        appends = [r["learned_appends"] for r in ranks]
        out += [("0 request-path compiles on every rank", all(r["request_path_compiles"] == 0 for r in ranks)),
                (f"rank {args.miss_rank} missed (cut {cut} keys) and swapped them in; swaps on ranks {swapped}",
                 cut > 0 and miss["swaps"] == cut and swapped == [args.miss_rank]),
                ("no miss on the other ranks", all(r["fallback_launches"] == r["runtime_compiles"] == 0 for r in others)),
                (f"each cut key learned once: {lines} lines, {distinct} keys in the shared file; appends by rank "
                 f"{appends}", lines == distinct == cut and appends[args.miss_rank] == cut and sum(appends) == cut)]
    return out


def sum_ok(args: argparse.Namespace, r: dict) -> bool:
    """Every step all-reduced once, in order, with the expected sum."""
    return (r["step_indices"] == list(range(r["steps"]))
            and r["sums"] == [expected_sum(args.ranks, s) for s in r["step_indices"]])


def print_phase(args: argparse.Namespace, phase: str, ranks: list[dict], met: list[tuple[str, bool]]) -> None:
    first = ranks[0]
    where = f"{first['device']}" + (f" (compile-only {first['target']}, dry launches)" if first["target"] else "")
    what = ("error mode, cold cache folder, group warm-up" if phase == "replay"
            else f"fallback mode, rank {args.miss_rank}'s key space cut")
    print(f"\n{phase}: {what}; {args.ranks} ranks over {first['backend']} on {where}, {args.config}, "
          f"{args.requests} requests")
    heads = ("rank", "steps", "warm-up s", "median step ms", "p99 wait ms", "max wait ms (step)", "wait/median",
             "req-path", "fallback", "backgr.", "swaps", "runtime", "cut", "learned", "sums ok")
    widths = (4, 7, 10, 15, 12, 20, 12, 9, 9, 8, 6, 8, 4, 8, 12)
    print("".join(f"{h:>{w}}" for h, w in zip(heads, widths)))
    for r in ranks:
        cells = (r["rank"], r["steps"], f"{r['warmup_seconds']:.2f}", f"{r['median_step_ms']:.3f}",
                 f"{r['p99_wait_ms']:.3f}",
                 f"{r['max_wait_ms']:.3f} ({r['max_wait_step']})", f"{r['wait_ratio']:.2f}x",
                 *(r[k] for k in COUNTS), len(r["cut"]), r["learned_appends"],
                 f"{sum(a == b for a, b in zip(r['sums'], (expected_sum(args.ranks, s) for s in r['step_indices'])))}"
                 f"/{r['steps']}")
        print("".join(f"{c!s:>{w}}" for c, w in zip(cells, widths)))
    on_gpu = str(first["device"]).startswith("cuda")
    for i, (what, ok) in enumerate(met):
        if i == 0 and not on_gpu:  # the wait ratio: judged on GPUs only (a dry CPU step is ~0.3 ms)
            print(f"  n/a    {what}: not judged on {first['device']} (shared cores, dry steps)")
        else:
            print(f"  {'met   ' if ok else 'MISSED'} {what}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--miss-rank", type=int, default=1, help="the rank whose key space is cut (miss phase)")
    parser.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES))
    parser.add_argument("--config", default="dsv4-like")
    parser.add_argument("--requests", type=int, default=1000, help="requests of the shipped trace replayed")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                        help="cuda: NCCL, one GPU per rank; cpu: gloo, compile-only; auto: cuda with enough GPUs")
    parser.add_argument("--target", default="cuda:90", help="the compile-only target on cpu")
    parser.add_argument("--workers", type=int, default=None, help="warm-up compile workers per rank")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a collective may wait")
    parser.add_argument("--json", help="also write every rank's results here")
    parser.add_argument("--folder", help="work in this new folder, kept (the shared cache folder and its learned-keys "
                                         "file: FOLDER/cache); default: a temporary one")
    args = parser.parse_args()
    if args.ranks < 2 or not 0 <= args.miss_rank < args.ranks:
        parser.error(f"--ranks {args.ranks} --miss-rank {args.miss_rank}: needs 2+ ranks and 0 <= miss rank < ranks")
    if args.folder and os.path.exists(args.folder):
        parser.error(f"--folder {args.folder}: exists; give a new one (a used cache folder would not start cold)")
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if args.device == "auto":
        args.device = "cuda" if gpus >= args.ranks else "cpu"
    elif args.device == "cuda" and gpus < args.ranks:
        parser.error(f"--device cuda: {args.ranks} ranks need {args.ranks} GPUs, {gpus} here")
    args.workers = args.workers or max(1, (os.cpu_count() or 1) // args.ranks)
    if not args.timeout > 0:
        parser.error(f"--timeout {args.timeout}: must be > 0 seconds")
    from zerojit.kernels.mla.config import ConfigError
    from zerojit.outputs import output_problem, write_output
    from zerojit.precompile import WorkerSettingError, worker_nice, worker_start_method
    from zerojit.runner.config import load_config
    from zerojit.runner.engine import RunError, RunOptions

    try:  # every rank would fail on these with its own traceback: refuse them once, here
        worker_start_method(), worker_nice()
        load_config(args.config)
        RunOptions(config=args.config, requests=args.requests, device=args.device, target=args.target,
                   workers=args.workers)
    except (ConfigError, RunError, WorkerSettingError) as e:
        parser.error(str(e))
    if args.json and (problem := output_problem(args.json)):  # not after minutes of work
        parser.error(f"--json {args.json}: cannot write there: {problem}")
    os.environ.update(NO_MULTICAST)  # before any rank starts: they inherit it
    os.environ.pop("ZEROJIT_JIT_MONITOR", None)
    os.environ.pop("ZEROJIT_LEARN", None)  # the learned-key count is a goal

    results, failed = {}, False
    if args.folder:
        os.makedirs(args.folder)
    with (contextlib.nullcontext(os.path.abspath(args.folder)) if args.folder
          else tempfile.TemporaryDirectory(prefix="zerojit-tp-")) as root:
        for phase in args.phases:
            ranks = run_phase(args, phase, root)
            learned = learned_lines(ranks[0]["learned_file"])
            met = goals(args, phase, ranks, learned)
            print_phase(args, phase, ranks, met)
            failed |= not all(ok for _, ok in met[1:])
            results[phase] = {"ranks": ranks, "learned_lines": learned[0], "learned_keys": learned[1],
                              "goals": [{"goal": g, "met": ok} for g, ok in met]}
    if args.json:
        write_output(args.json, json.dumps({"args": vars(args), "results": results}, indent=2))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
