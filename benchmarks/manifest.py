"""An unmodified Liger-Kernel program on a GPU: first request without warm-up vs after
``zerojit exec --manifest``, and a manifest's warm-up with workers vs serial.

The program (``--program``) is plain library use: Liger's RMSNorm forward
(``liger_kernel.ops.rms_norm.LigerRMSNormFunction``) over a realistic shape spread, token counts
1 to 8192, hidden sizes 2048 and 4096, bf16 (each shape a "request"). For each shape it times the
first call and the median of 20 more (steady state), synchronizing after each, and prints one
JSON line; then it does the same over every shape again (``pass 2``: what a shape's first call
costs once the process has run every other one: the allocator's blocks and the code are warm).
zerojit never appears in it.

The benchmark, each step in a fresh process and, where it compiles, an empty Triton cache:

1. ``zerojit record -o M -- python manifest.py --program``: the manifest of what it launched;
2. ``python manifest.py --program``: no warm-up (every new specialization compiles in its first
   request);
3. ``zerojit exec --manifest M -- python manifest.py --program``: the manifest warmed (workers),
   then the same program, monitor in error mode;
4. ``zerojit warmup --manifest M --json R`` with ``--workers N`` (forked workers, the default on
   Linux), ``--workers N`` with ``ZEROJIT_WORKER_START=spawn`` and ``--workers 1`` (serial:
   Triton's compiles one after the other in the process), alternating over ``--rounds``, each
   with a new cache folder in one Triton home (a known install: its build hash is remembered).

Printed: per mode and per shape the first request's latency and its ratio to steady state (the
median and range over shapes), and per warm-up mode the process's seconds and the report's
phases (``manifest``: reading the manifest; ``modules``: importing Liger, torch included;
``fork``; ``sweep``; ``workers``; ...), medians over rounds, with the workers' boot and busy share.

Without a GPU, ``--target cuda:90`` runs it compile-only: every launch is a dry launch (binder
and lookup, nothing executed; outputs not computed) on CPU tensors, so the first-request figures
show the launch path's own first-use costs only; the warm-up figures are real compiles.

Usage: ``PYTHONPATH=src python benchmarks/manifest.py [--rounds 3] [--workers 16] [--target T] [--json OUT]``
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

SHAPES = [(t, h) for h in (2048, 4096) for t in (1, 7, 16, 100, 1024, 3000, 8192)]


def program(device: str) -> None:
    """The unmodified program: Liger RMSNorm over the shape spread, timing each shape, twice."""
    import torch
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for rep in (1, 2):
        for tokens, hidden in SHAPES:
            x = torch.randn(tokens, hidden, device=device, dtype=torch.bfloat16)
            w = torch.ones(hidden, device=device, dtype=torch.bfloat16)
            sync()
            t0 = time.perf_counter()
            LigerRMSNormFunction.apply(x, w, 1e-6)
            sync()
            first = time.perf_counter() - t0
            steady = []
            for _ in range(20):
                t0 = time.perf_counter()
                LigerRMSNormFunction.apply(x, w, 1e-6)
                sync()
                steady.append(time.perf_counter() - t0)
            print(json.dumps({"pass": rep, "tokens": tokens, "hidden": hidden, "first_ms": first * 1e3,
                              "steady_ms": statistics.median(steady) * 1e3}), flush=True)


def _run(cmd: list[str], cache: str, home: str, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    env = dict(os.environ, TRITON_CACHE_DIR=cache, TRITON_HOME=home, PYTHONUNBUFFERED="1", **env)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    took = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out, took


def _rows(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def _boot_and_busy(stats: dict) -> str:
    """A worker's boot (median) and how busy the workers were from their first request to the last reply."""
    tl = stats["timeline"]
    boots: dict[int, float] = {}
    for t in tl:
        if not t["what"].startswith(("compile ", "cached ", "failed ", "launcher ")):
            boots[t["worker"]] = boots.get(t["worker"], 0.0) + t["end"] - t["start"]
    work = [t for t in tl if t["what"].startswith(("compile ", "cached ", "launcher "))]
    if not work:
        return ""
    first, last = min(t["start"] for t in work), max(t["end"] for t in work)
    busy = sum(t["end"] - t["start"] for t in work) / (stats["workers"] * max(last - first, 1e-9))
    return (f"boot {statistics.median(boots.values()):.3f} s a worker, requests {first:.2f}-{last:.2f} s, "
            f"{100 * busy:.0f}% busy")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--program", action="store_true", help="run the unmodified program itself")
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # the program's tensors
    parser.add_argument("--rounds", type=int, default=3, help="warm-up rounds per mode, alternating")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--target", help="compile-only target (no GPU: dry launches on CPU tensors)")
    parser.add_argument("--json", help="also write the results here")
    opts = parser.parse_args()
    if opts.program:
        return program(opts.device)
    import torch

    if not torch.cuda.is_available() and not opts.target:
        print("benchmarks/manifest.py needs a CUDA GPU (it measures real first launches), or --target cuda:90 for "
              "dry launches; nothing measured")
        return
    py, me = sys.executable, os.path.abspath(__file__)
    zj = [py, "-m", "zerojit"]
    target = ["--target", opts.target] if opts.target else []
    prog = [py, me, "--program", "--device", "cpu" if opts.target else "cuda"]
    modes = {f"workers {opts.workers} (fork)": (opts.workers, {}),
             f"workers {opts.workers} (spawn)": (opts.workers, {"ZEROJIT_WORKER_START": "spawn"}),
             "serial (workers 1)": (1, {})}
    with tempfile.TemporaryDirectory() as tmp:
        home = os.path.join(tmp, "home")  # one Triton home: a known install after the first step

        def cache(name: str) -> str:
            return os.path.join(tmp, name, "cache")

        manifest = os.path.join(tmp, "m.json")
        _run([*zj, "record", "-o", manifest, *target, "--", *prog], cache("record"), home)
        plain, _ = _run(prog, cache("plain"), home) if not opts.target else (None, 0.0)
        warmed, _ = _run([*zj, "exec", "--manifest", manifest, *target, "--workers", str(opts.workers), "--no-progress",
                          "--", *prog], cache("exec"), home)
        runs: dict[str, list] = {name: [] for name in modes}
        for r in range(opts.rounds):
            for name, (n, env) in modes.items():
                report = os.path.join(tmp, f"w{r}-{len(runs[name])}-{n}-{bool(env)}.json")
                _, took = _run([*zj, "warmup", "--manifest", manifest, *target, "--workers", str(n), "--no-progress",
                                "--json", report], cache(f"w{r}-{n}-{bool(env)}"), home, **env)
                with open(report) as f:
                    runs[name].append((took, json.load(f)))
        with open(manifest) as f:
            specs = sum(len(k.get("specializations", [])) for k in json.load(f).get("kernels", []))
    where = torch.cuda.get_device_name() if not opts.target else f"compile-only {opts.target} (dry launches)"
    results: dict = {"where": where, "shapes": len(SHAPES), "specializations": specs, "cpus": os.cpu_count()}
    print(f"unmodified Liger RMSNorm program, {len(SHAPES)} shapes (tokens 1-8192, hidden 2048/4096, bf16), "
          f"{specs} recorded specializations; {where}; {os.cpu_count()} CPUs")
    print("  first request / steady state, per shape (pass 1; pass 2: every shape again, same process)")
    header = "    " + f"{'tokens x hidden':<16}" + "".join(f"{name:>34}" for name in ("no warm-up", "zerojit exec --manifest")
                                                       if name != "no warm-up" or plain is not None)
    print(header)
    outs = [("no warm-up", plain), ("zerojit exec --manifest", warmed)]
    outs = [(n, _rows(o.stdout)) for n, o in outs if o is not None]
    for i, (tokens, hidden) in enumerate(SHAPES):
        cells = []
        for _, rows in outs:
            p1 = next(r for r in rows if r["pass"] == 1 and (r["tokens"], r["hidden"]) == (tokens, hidden))
            p2 = next(r for r in rows if r["pass"] == 2 and (r["tokens"], r["hidden"]) == (tokens, hidden))
            cells.append(f"{p1['first_ms']:8.3f} ms {p1['first_ms'] / p1['steady_ms']:6.2f}x (pass 2 "
                         f"{p2['first_ms'] / p2['steady_ms']:4.1f}x)")
        print(f"    {f'{tokens} x {hidden}':<16}" + "".join(f"{c:>34}" for c in cells))
    for name, rows in outs:
        r = [x["first_ms"] / x["steady_ms"] for x in rows if x["pass"] == 1]
        results[name] = {"median": statistics.median(r), "min": min(r), "max": max(r), "rows": rows}
        print(f"    {name:<26} median {statistics.median(r):6.2f}x  ({min(r):.2f}-{max(r):.2f}x)")
    print(f"  manifest warm-up, whole process (seconds), {opts.rounds} alternating rounds: median (min-max); "
          "report phases (medians)")
    for name, got in runs.items():
        secs = [t for t, _ in got]
        phases: dict[str, list] = {}
        for _, rep in got:
            for p in rep["stats"]["phases"]:
                phases.setdefault(p["phase"], []).append(p["seconds"])
        last = got[-1][1]["stats"]
        results[name] = {"seconds": secs, "reports": [rep for _, rep in got]}
        print(f"    {name:<26} {statistics.median(secs):8.2f} s ({min(secs):.2f}-{max(secs):.2f}); "
              f"{last['worker_compiled']} compiled by workers, {last['compiled']} here")
        print(f"      phases: " + ", ".join(f"{p} {statistics.median(v):.3f}" for p, v in phases.items())
              + (f"; {_boot_and_busy(last)}" if last["workers"] else ""))
        for note in last["recovered"]:
            print(f"      note: {note.splitlines()[0]}")
    serial = statistics.median(t for t, _ in runs["serial (workers 1)"])
    for name in list(modes)[:2]:
        par = statistics.median(t for t, _ in runs[name])
        print(f"    serial / {name}: {serial / par:.2f}x")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
