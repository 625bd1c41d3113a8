"""An unmodified Liger-Kernel inference program on a GPU: first request without warm-up vs after
``zerojit exec --manifest`` (and with the program's own primer request), and a manifest's warm-up
with workers vs serial.

The program (``--program``) is plain library use, forward only under ``torch.inference_mode()``
as an engine runs it: the Liger ops of one decoder block, called the way the block calls them,
over four model shapes and token counts 1 to 8192, bf16 (each token count of each model a
"request"). The shapes are those of Llama-3.2-1B (hidden 2048, SwiGLU 8192, 32 query / 8 key-value
heads of 64), Llama-3.1-8B (4096, 14336, 32 / 8 heads of 128), Qwen3-4B (2560, 9728, 32 / 8 heads
of 128, with RMSNorm over each query and key head) and Gemma-2-2B (2304, GeGLU 9216, 8 / 4 heads
of 256, Gemma's RMSNorm: offset 1, computed in fp32). The ops, from ``liger_kernel.ops``:
``LigerRMSNormFunction`` (the input norm; Qwen3's q-norm and k-norm), ``LigerRopeFunction``,
``LigerFusedAddRMSNormFunction`` (the residual add and post-attention norm), and
``LigerSiLUMulFunction`` or ``LigerGELUMulFunction``. That is about 20 distinct Triton
specializations (printed: the manifest's count): the head layout's constexprs and the sequence
length's int class (1, divisible by 16, other) for RoPE; the block size and casting mode for the
norms, and Liger's row-block RMSNorm kernel once a q/k-norm has 32,768 rows or more. For each
request and op it times the first call and the median of 20 more (steady state), synchronizing
after each, and prints one JSON line (``pass``, ``model``, ``op``, ``tokens``, ``first_ms``,
``steady_ms``); then it does the same over every request again (``pass 2``: what a request's
first call costs once the process has run every other one). With ``--prime`` it first makes one
request of each model at 2 tokens (an int neither 1 nor divisible by 16: the class of the
recorded 7, 100 and 3000, so every launch is a recorded specialization; it is not timed as a
request, its total is printed as ``primer_ms``), as an engine's dummy run before serving: what
is left of a first request then is the program's own first use of a shape or a kernel (Python,
torch, Triton's launch path), not a compile or a load. zerojit never appears in the program.

The benchmark, each step in a fresh process and, where it compiles, an empty Triton cache:

1. ``zerojit record -o M -- python manifest.py --program``: the manifest of what it launched;
2. the imports a fresh process pays for the recorded kernels' modules: torch, ``torch._dynamo``
   (Liger imports it), the modules themselves;
3. ``python manifest.py --program``: no warm-up (every new specialization compiles in its first
   request; on a GPU only);
4. ``zerojit exec --manifest M -- python manifest.py --program``: the manifest warmed (workers),
   then the same program, monitor in error mode (a launch not in the manifest fails the run);
5. the same with ``--program --prime``;
6. ``zerojit warmup --manifest M --json R`` with ``--workers N`` (forked workers, the default on
   Linux), ``--workers N`` with ``ZEROJIT_WORKER_START=spawn`` and ``--workers 1`` (serial:
   Triton's compiles one after the other in the process), alternating over ``--rounds``, each
   with a new cache folder in one Triton home (a known install: its build hash is remembered).

Printed: per model and op, per mode, the first request's latency as a ratio to steady state (the
largest over token counts, at which count, and the median), the process's first request, the
median and range over all requests, and the slowest first requests; per warm-up mode the
process's seconds, the warm-up's own (the report's ``seconds``) and the warm-up without the
``manifest`` and ``modules`` phases (reading the file; importing the recorded
kernels' modules, torch and Liger included, which a serial Triton program pays as well), each
serial / workers; the report's phases (``fork``, ``sweep``, ``workers``, ...), medians over
rounds, with the workers' boot and busy share.

Without a GPU, ``--target cuda:90`` runs it compile-only: every launch is a dry launch (binder
and lookup, nothing executed; outputs not computed) on CPU tensors, so the first-request figures
show the launch path's own first-use costs only; the warm-up figures are real compiles. Without
either it says so in one line and exits 2.

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
from typing import NamedTuple


class Model(NamedTuple):
    """A decoder block's shapes: widths in elements, heads of ``head_dim`` elements."""

    hidden: int
    intermediate: int
    q_heads: int
    kv_heads: int
    head_dim: int
    mlp: str  # "swiglu" (SiLU(gate) * up) or "geglu" (GELU-tanh(gate) * up)
    gemma_norm: bool  # Gemma's RMSNorm: weight offset 1.0, computed in fp32
    qk_norm: bool  # Qwen3: RMSNorm over each query and key head before RoPE


MODELS = {
    "llama3-1b": Model(2048, 8192, 32, 8, 64, "swiglu", False, False),
    "llama3-8b": Model(4096, 14336, 32, 8, 128, "swiglu", False, False),
    "qwen3-4b": Model(2560, 9728, 32, 8, 128, "swiglu", False, True),
    "gemma2-2b": Model(2304, 9216, 8, 4, 256, "geglu", True, False),
}
TOKENS = (1, 7, 16, 100, 1024, 3000, 8192)
PRIME_TOKENS = 2  # Triton's int class of 7, 100 and 3000 (not 1, not divisible by 16): recorded keys only
MODES = ("no warm-up", "zerojit exec --manifest", "exec, program primed")


def block_ops(model: Model, tokens: int, device: str) -> list:
    """The Liger forward ops of one decoder block at ``tokens`` tokens (batch 1), in the block's
    order, as ``(name, call)``; the inputs are made here, outside any timing."""
    import torch
    from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
    from liger_kernel.ops.geglu import LigerGELUMulFunction
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    from liger_kernel.ops.rope import LigerRopeFunction
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction

    make = torch.randn if device == "cuda" else torch.empty  # a dry launch reads nothing
    bf16 = {"device": device, "dtype": torch.bfloat16}
    m, eps = model, 1e-6
    offset, casting = (1.0, "gemma") if m.gemma_norm else (0.0, "llama")
    x, residual = make(tokens, m.hidden, **bf16), make(tokens, m.hidden, **bf16)
    w = torch.ones(m.hidden, **bf16)
    # q and k as a model passes them to RoPE: (batch, heads, tokens, head_dim) views of the projection's output
    q = make(1, tokens, m.q_heads, m.head_dim, **bf16).transpose(1, 2)
    k = make(1, tokens, m.kv_heads, m.head_dim, **bf16).transpose(1, 2)
    angle = torch.rand(1, tokens, m.head_dim, device=device)
    cos, sin = angle.cos().to(torch.bfloat16), angle.sin().to(torch.bfloat16)
    gate, up = make(tokens, m.intermediate, **bf16), make(tokens, m.intermediate, **bf16)
    act = LigerSiLUMulFunction if m.mlp == "swiglu" else LigerGELUMulFunction
    ops = [("norm", lambda: LigerRMSNormFunction.apply(x, w, eps, offset, casting))]
    if m.qk_norm:
        qh, kh = make(tokens, m.q_heads, m.head_dim, **bf16), make(tokens, m.kv_heads, m.head_dim, **bf16)
        wh = torch.ones(m.head_dim, **bf16)
        ops += [("q-norm", lambda: LigerRMSNormFunction.apply(qh, wh, eps)),
                ("k-norm", lambda: LigerRMSNormFunction.apply(kh, wh, eps))]
    ops += [("rope", lambda: LigerRopeFunction.apply(q, k, cos, sin)),
            ("add+norm", lambda: LigerFusedAddRMSNormFunction.apply(x, residual, w, eps, offset, casting)),
            (m.mlp, lambda: act.apply(gate, up))]
    return ops


def program(device: str, prime: bool) -> None:
    """The unmodified program: every model's block ops at every token count, timing each, twice
    (after one untimed request per model at ``PRIME_TOKENS`` tokens with ``prime``)."""
    import torch

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with torch.inference_mode():
        if prime:
            t0 = time.perf_counter()
            for model in MODELS.values():
                for _, call in block_ops(model, PRIME_TOKENS, device):
                    call()
            sync()
            print(json.dumps({"primer_ms": (time.perf_counter() - t0) * 1e3}), flush=True)
        for rep in (1, 2):
            for name, model in MODELS.items():
                for tokens in TOKENS:
                    for op, call in block_ops(model, tokens, device):
                        sync()
                        t0 = time.perf_counter()
                        call()
                        sync()
                        first = time.perf_counter() - t0
                        steady = []
                        for _ in range(20):
                            t0 = time.perf_counter()
                            call()
                            sync()
                            steady.append(time.perf_counter() - t0)
                        print(json.dumps({"pass": rep, "model": name, "op": op, "tokens": tokens,
                                          "first_ms": first * 1e3, "steady_ms": statistics.median(steady) * 1e3}),
                              flush=True)


IMPORTS = """import importlib, json, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import torch._dynamo
t2 = time.perf_counter()
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps({"torch": t1 - t0, "torch._dynamo": t2 - t1, "modules": time.perf_counter() - t2}))
"""


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


def _ratio(row: dict) -> float:
    return row["first_ms"] / row["steady_ms"]


def _first_requests(outs: dict[str, list[dict]], results: dict) -> None:
    """Print the first-request table (per model and op, per mode) and each mode's summary."""
    ops = list(dict.fromkeys((r["model"], r["op"]) for r in next(iter(outs.values())) if r.get("pass") == 1))
    print("  first request / steady state, pass 1 (pass 2: every request again, same process); "
          "per model and op over the token counts: largest (at tokens), median")
    print(f"    {'model':<10} {'op':<9}" + "".join(f"{name:>27}" for name in outs))
    for model, op in ops:
        cells = []
        for rows in outs.values():
            mine = [r for r in rows if r.get("pass") == 1 and (r["model"], r["op"]) == (model, op)]
            worst = max(mine, key=_ratio)
            cells.append(f"{_ratio(worst):8.1f}x ({worst['tokens']:>4}) {statistics.median(map(_ratio, mine)):6.2f}x")
        print(f"    {model:<10} {op:<9}" + "".join(f"{c:>27}" for c in cells))
    for name, rows in outs.items():
        p1 = [r for r in rows if r.get("pass") == 1]
        r1, r2 = [_ratio(r) for r in p1], [_ratio(r) for r in rows if r.get("pass") == 2]
        primer = next((r["primer_ms"] for r in rows if "primer_ms" in r), None)
        results[name] = {"median": statistics.median(r1), "min": min(r1), "max": max(r1), "rows": rows}
        print(f"    {name}: the process's first request {p1[0]['first_ms']:.3f} ms = {r1[0]:.1f}x steady "
              f"({p1[0]['model']} {p1[0]['op']} x {p1[0]['tokens']}); {len(p1)} op calls median "
              f"{statistics.median(r1):.2f}x ({min(r1):.2f}-{max(r1):.2f}x), pass 2 median {statistics.median(r2):.2f}x "
              f"(max {max(r2):.1f}x)"
              + (f"; primer {primer:.1f} ms" if primer is not None else ""))
        slowest = sorted(p1, key=_ratio, reverse=True)[:4]
        print("      slowest: " + ", ".join(f"{r['model']} {r['op']} x {r['tokens']} {r['first_ms']:.3f} ms "
                                           f"({_ratio(r):.1f}x)" for r in slowest))


def _warmups(runs: dict[str, list], results: dict, rounds: int) -> None:
    """Print each warm-up mode's seconds (process, warm-up, warm-up less the manifest phases),
    phases, and serial / each workers mode."""
    def own(rep: dict) -> tuple[float, float]:
        phases = {p["phase"]: p["seconds"] for p in rep["stats"]["phases"]}
        return rep["seconds"], rep["seconds"] - sum(v for k, v in phases.items() if k in ("manifest", "modules"))

    print(f"  manifest warm-up, {rounds} alternating rounds, seconds: median (min-max) of the whole process; "
          "of the warm-up (report); of the warm-up less manifest/modules (the recorded modules' imports, "
          "which serial Triton pays too)")
    medians = {}
    for name, got in runs.items():
        secs = [t for t, _ in got]
        warm, bare = [own(rep)[0] for _, rep in got], [own(rep)[1] for _, rep in got]
        phases: dict[str, list] = {}
        for _, rep in got:
            for p in rep["stats"]["phases"]:
                phases.setdefault(p["phase"], []).append(p["seconds"])
        last = got[-1][1]["stats"]
        medians[name] = tuple(statistics.median(v) for v in (secs, warm, bare))
        results[name] = {"seconds": secs, "warmup_seconds": warm, "less_manifest_seconds": bare,
                         "reports": [rep for _, rep in got]}
        print(f"    {name:<22} process {medians[name][0]:6.2f} s ({min(secs):.2f}-{max(secs):.2f}), "
              f"warm-up {medians[name][1]:6.2f} s, less manifest {medians[name][2]:6.2f} s "
              f"({min(bare):.2f}-{max(bare):.2f}); {last['worker_compiled']} compiled by workers, "
              f"{last['compiled']} here")
        busy = _boot_and_busy(last) if last["workers"] else ""
        print("      phases: " + ", ".join(f"{p} {statistics.median(v):.3f}" for p, v in phases.items())
              + (f"; {busy}" if busy else ""))
        for note in last["recovered"]:
            print(f"      note: {note.splitlines()[0]}")
    serial = medians["serial (workers 1)"]
    for name in list(runs)[:2]:
        par = medians[name]
        print(f"    serial / {name}: process {serial[0] / par[0]:.2f}x, warm-up {serial[1] / par[1]:.2f}x, "
              f"less manifest {serial[2] / par[2]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--program", action="store_true", help="run the unmodified program itself")
    parser.add_argument("--prime", action="store_true",
                        help=f"with --program: first one untimed request per model at {PRIME_TOKENS} tokens")
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # the program's tensors
    parser.add_argument("--rounds", type=int, default=3, help="warm-up rounds per mode, alternating")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--target", help="compile-only target (no GPU: dry launches on CPU tensors)")
    parser.add_argument("--json", help="also write the results here")
    opts = parser.parse_args()
    if opts.program:
        return program(opts.device, opts.prime)
    if opts.rounds < 1:  # each refused before the first process (--rounds 0 was an IndexError after minutes)
        parser.error(f"--rounds must be >= 1, got {opts.rounds}")
    if opts.workers < 1:
        parser.error(f"--workers must be >= 1, got {opts.workers}")
    from zerojit.outputs import output_problem, write_output

    if opts.json and (problem := output_problem(opts.json)):
        parser.error(f"--json {opts.json}: cannot write there: {problem}")
    import torch

    if not torch.cuda.is_available() and not opts.target:  # (it said so and exited 0)
        print("manifest.py needs a CUDA GPU (it measures real first launches), or --target cuda:90 for dry launches",
              file=sys.stderr)
        sys.exit(2)
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
        with open(manifest) as f:
            kernels = json.load(f).get("kernels", [])
        specs = sum(len(k.get("specializations", [])) for k in kernels)
        modules = sorted({k["module"] for k in kernels})
        imports, _ = _run([py, "-c", IMPORTS, *modules], cache("imports"), home)
        imports_s = json.loads(imports.stdout.strip().splitlines()[-1])
        outs: dict[str, list[dict]] = {}
        if not opts.target:
            outs[MODES[0]] = _rows(_run(prog, cache("plain"), home)[0].stdout)
        for name, extra in zip(MODES[1:], ([], ["--prime"])):
            warmed, _ = _run([*zj, "exec", "--manifest", manifest, *target, "--workers", str(opts.workers),
                              "--no-progress", "--", *prog, *extra], cache(name.replace(" ", "-")), home)
            outs[name] = _rows(warmed.stdout)
        runs: dict[str, list] = {name: [] for name in modes}
        for r in range(opts.rounds):
            for name, (n, env) in modes.items():
                report = os.path.join(tmp, f"w{r}-{len(runs[name])}-{n}-{bool(env)}.json")
                _, took = _run([*zj, "warmup", "--manifest", manifest, *target, "--workers", str(n), "--no-progress",
                                "--json", report], cache(f"w{r}-{n}-{bool(env)}"), home, **env)
                with open(report) as f:
                    runs[name].append((took, json.load(f)))
    where = torch.cuda.get_device_name() if not opts.target else f"compile-only {opts.target} (dry launches)"
    calls = sum(1 for r in next(iter(outs.values())) if r.get("pass") == 1)
    results: dict = {"where": where, "op_calls": calls, "kernels": len(kernels), "specializations": specs,
                     "imports": imports_s, "cpus": os.cpu_count()}
    print(f"unmodified Liger-Kernel inference program: {len(MODELS)} models ({', '.join(MODELS)}) x "
          f"{len(TOKENS)} token counts ({TOKENS[0]}-{TOKENS[-1]}), a decoder block's bf16 forward ops: {calls} "
          f"timed op calls a pass; {specs} recorded specializations of {len(kernels)} kernels; {where}; "
          f"{os.cpu_count()} CPUs")
    print(f"  a fresh process's imports of the recorded modules: torch {imports_s['torch']:.2f} s, torch._dynamo "
          f"+{imports_s['torch._dynamo']:.2f} s, {', '.join(modules)} +{imports_s['modules']:.2f} s")
    _first_requests(outs, results)
    _warmups(runs, results, opts.rounds)
    if opts.json:
        write_output(opts.json, json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
