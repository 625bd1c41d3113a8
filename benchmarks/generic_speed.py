"""Generic variants' speed: generic vs specialized, side by side, on a GPU (issue 29).

A generic variant (:func:`zerojit.generic.generic_function_of`: every non-constexpr argument
unspecialized, every pointer without the 16-byte alignment assumption) serves a miss until the
specialized variant is swapped in. How much slower is it? For every case below, the specialized
``triton.jit`` function and its generic function are launched directly by Triton with the same
arguments (those the zerojit launcher passes, :func:`launch_arguments`), so this needs only
what is on main, no warm-up and no monitor:

* the seven sparse-MLA kernels (docs KERNELS.md) at every size of ``benchmarks/kernels.py``
  (its case builder: decode R = 64 and 256, prefill T = 1,024 and 8,192, same configs, flavours
  and seeds; ``--quick``: its goal sizes only);
* one strided 2-D float kernel, Liger's ``_rms_norm_forward_kernel`` (bf16, llama casting, as
  ``liger_kernel.ops.rms_norm.rms_norm_forward`` launches it: row strides, ``n_cols``, and the
  ``W`` and ``RSTD`` strides of 1), at hidden 4096 and 7168 and 1 to 32,768 rows.

Where a launch has ints equal to 1 that the specialized variant folds into a constexpr (Liger's
``W_row_stride`` and ``RSTD_row_stride``), a third variant keeps that class
(``generic_function_of(fn, keep_one=those names)``, what a kernel's ``generic_keep`` does) and is
measured too: whether ``generic_keep`` recovers a size below the goal. The MLA kernels have no
such int (every runtime int is ``do_not_specialize`` already): "n/a".

Timing (triton.testing.do_bench's method, interleaved): ``--rounds`` rounds; in each, every
variant of a case (in a rotated order) runs ``--reps`` timed launches, each preceded by an L2
flush (a 256 MB buffer zeroed, outside the timed region), CUDA events around the launch alone.
Per variant: the median of all its launches and the spread (25th to 75th percentile). The ratio
"generic speed" = specialized time / generic time, taken per round (paired, same conditions) and
reported as the median of the rounds' ratios with their min-max. Goal: >= 90 % at every size.

Why a size is below the goal: each variant's vectorized global loads and stores (of all) in its
PTX are printed beside it (a generic variant knows no pointer alignment and no stride's
divisibility, so it may load element by element where the specialized variant loads 16 bytes).

Outputs: each variant's outputs after one launch on fresh output buffers are compared with the
specialized variant's (``torch.equal``; the MLA kernels are integer kernels, so the generic must
be exact; for RMSNorm the largest difference is printed).

Usage (GPU)::

    PYTHONPATH=src python3 benchmarks/generic_speed.py [--quick] [--json OUT.json]

Without a GPU, ``--dry`` builds every case on the CPU and compiles every variant for ``cuda:90``
under :func:`zerojit.compile_only.compile_only` (dry launches): the GPU run's plumbing, checked.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

GOAL = 0.90  # generic speed / specialized speed, at every size
FLUSH_BYTES = 256 << 20
RMSNORM_HIDDEN = (4096, 7168)
RMSNORM_ROWS = (1, 64, 1024, 8192, 32768)


@dataclass
class Case:
    """One kernel at one size, with what each variant launches."""

    kernel: str  # "K1", ..., "RMSNorm"
    size: str
    jit_fn: Any
    grid: tuple
    args: dict[str, Any]  # by parameter name, launch options included
    fresh: Callable[[], tuple[dict[str, Any], list]]  # new arguments and their outputs (for the output check)
    keep_one: tuple[str, ...] = ()
    times: dict[str, list[list[float]]] = field(default_factory=dict)  # variant -> per round, µs
    memory: dict[str, tuple[int, int]] = field(default_factory=dict)  # variant -> (vector, all) global loads/stores
    outputs: dict[str, str] = field(default_factory=dict)  # variant -> "exact" / "max |diff| ..."

    @property
    def variants(self) -> dict[str, Any]:
        from zerojit.generic import generic_function_of

        out = {"specialized": self.jit_fn, "generic": generic_function_of(self.jit_fn)}
        if self.keep_one:
            out["generic_keep"] = generic_function_of(self.jit_fn, self.keep_one)
        return out


def launch_arguments(kernel: Any, inputs: dict[str, Any]) -> tuple[tuple, dict[str, Any], list]:
    """``(grid, arguments by parameter name with launch options, output tensors)`` of the launch
    the zerojit ``kernel`` makes for ``inputs``, launching nothing (its checks and output
    allocation run): what ``TritonJitKernel.select_variant`` computes."""
    entry = type(kernel).__call__
    spec = entry._zerojit_method(kernel, **inputs)
    values = tuple(inputs[n] if n in inputs else d for n, d in entry._zerojit_inputs)
    returns = spec.returns
    outs = [returns] if hasattr(returns, "data_ptr") else [t for t in returns if t is not None]
    return tuple(spec.grid), kernel._named_args(spec, values), outs


def ones_folded(jit_fn: Any, args: dict[str, Any]) -> tuple[str, ...]:
    """Non-constexpr int parameters equal to 1 that ``jit_fn`` specializes on value (Triton makes
    them constexpr 1): the names a ``generic_keep`` would list for this launch."""
    return tuple(p.name for p in jit_fn.params if not p.is_constexpr and not p.do_not_specialize
                 and type(args.get(p.name)) is int and args[p.name] == 1)


def mla_cases(kernels: tuple[str, ...], *, device: Any, quick: bool, seed: int) -> list[Case]:
    """The MLA kernels at ``benchmarks/kernels.py``'s sizes."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import kernels as kb

    from zerojit.kernels.mla.combine import combine_topk_swa_indices
    from zerojit.kernels.mla.decode import prepare_uniform_decode
    from zerojit.kernels.mla.index import convert_req_index_to_global_index
    from zerojit.kernels.mla.prefill import build_prefill_chunk_metadata, compute_prefill_metadata
    from zerojit.kernels.mla.slot_mapping import compressed_slot_mapping
    from zerojit.kernels.mla.swa import compute_swa_indices_and_lens

    launchers = dict(K1=convert_req_index_to_global_index, K2=compressed_slot_mapping, K3=prepare_uniform_decode,
                     K4=build_prefill_chunk_metadata, K5=compute_prefill_metadata, K6=compute_swa_indices_and_lens,
                     K7=combine_topk_swa_indices)
    setup = kb.build_cases(kernels, device=device, seed=seed, quick=quick)
    out = []
    for c in setup.cases:
        kernel, inputs = launchers[c.kernel], dict(c.ref_kwargs)
        grid, args, _ = launch_arguments(kernel, inputs)

        def fresh(kernel=kernel, inputs=inputs):
            _, a, outs = launch_arguments(kernel, inputs)
            return a, outs

        out.append(Case(c.kernel, c.size, kernel.kernel, grid, args, fresh, ones_folded(kernel.kernel, args)))
    return out


def rmsnorm_cases(*, device: Any, quick: bool) -> list[Case]:
    """Liger's RMSNorm forward as ``rms_norm_forward`` launches it (bf16, llama casting)."""
    import torch
    from liger_kernel.ops import rms_norm as liger

    fn = liger._rms_norm_forward_kernel
    out = []
    for hidden in RMSNORM_HIDDEN[:1] if quick else RMSNORM_HIDDEN:
        for rows in (RMSNORM_ROWS[1], RMSNORM_ROWS[-2]) if quick else RMSNORM_ROWS:
            g = torch.Generator().manual_seed(rows * 31 + hidden)
            X = torch.randn(rows, hidden, generator=g).to(device=device, dtype=torch.bfloat16)
            W = (1 + 0.1 * torch.randn(hidden, generator=g)).to(device=device, dtype=torch.bfloat16)
            block, warps = liger.calculate_settings(hidden)

            def fresh(X=X, W=W, block=block, warps=warps):
                Y = torch.empty_like(X)
                RSTD = torch.empty(X.shape[0], dtype=torch.float32, device=X.device)
                args = dict(Y_ptr=Y, Y_row_stride=Y.stride(0), X_ptr=X, X_row_stride=X.stride(0), W_ptr=W,
                            W_row_stride=W.stride(0), RSTD_ptr=RSTD, RSTD_row_stride=RSTD.stride(0),
                            n_cols=X.shape[1], eps=1e-6, offset=0.0, casting_mode=0, elementwise_affine=True,
                            BLOCK_SIZE=block, num_warps=warps)
                return args, [Y, RSTD]

            args, _ = fresh()
            out.append(Case("RMSNorm", f"rows={rows} hidden={hidden}", fn, (rows,), args, fresh,
                            ones_folded(fn, args)))
    return out


def memory_ops(compiled: Any) -> tuple[int, int]:
    """``(vectorized, all)`` global loads and stores in a compiled variant's PTX: where the
    generic variant is slower, usually because it cannot vectorize (it knows no alignment)."""
    ops = [line for line in compiled.asm["ptx"].splitlines() if "ld.global" in line or "st.global" in line]
    return sum(".v2." in op or ".v4." in op or ".v8." in op for op in ops), len(ops)


def inspect_variants(case: Case) -> None:
    """``case.memory``: each variant's global memory ops (its CompiledKernel, from Triton's cache)."""
    for name, fn in case.variants.items():
        case.memory[name] = memory_ops(fn.run(grid=case.grid, warmup=True, **case.args))


def check_outputs(case: Case) -> None:
    """Each variant's outputs after one launch on fresh buffers, against the specialized one's."""
    import torch

    got = {}
    for name, fn in case.variants.items():
        args, outs = case.fresh()
        fn[case.grid](**args)
        got[name] = [t.clone() for t in outs]
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    for name, outs in got.items():
        if name == "specialized":
            continue
        pairs = list(zip(outs, got["specialized"]))
        if all(torch.equal(a, b) for a, b in pairs):
            case.outputs[name] = "exact"
        else:
            worst = max(float((a.double() - b.double()).abs().max()) for a, b in pairs)
            case.outputs[name] = f"max |diff| {worst:.3g}"


def time_case(case: Case, *, rounds: int, reps: int, flush: Any) -> None:
    """``case.times[variant]``: per round, ``reps`` launch times in µs (CUDA events, L2 flushed)."""
    import torch

    variants = case.variants
    launch = {n: (lambda fn=fn: fn[case.grid](**case.args)) for n, fn in variants.items()}
    for f in launch.values():  # compile and load outside the timed region
        f()
    torch.cuda.synchronize()
    names = list(launch)
    case.times = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
            f = launch[n]
            for i in range(reps):
                flush.zero_()
                starts[i].record()
                f()
                ends[i].record()
            torch.cuda.synchronize()
            case.times[n].append([1e3 * s.elapsed_time(e) for s, e in zip(starts, ends)])


def summary(case: Case, name: str) -> dict[str, float]:
    """Median and quartiles of a variant's launches (µs); its speed relative to the specialized
    variant's per round (median, min, max)."""
    flat = sorted(t for rnd in case.times[name] for t in rnd)
    q = statistics.quantiles(flat, n=4)
    ratios = [statistics.median(s) / statistics.median(g)
              for s, g in zip(case.times["specialized"], case.times[name])]
    return dict(median_us=statistics.median(flat), p25_us=q[0], p75_us=q[2], speed=statistics.median(ratios),
                speed_min=min(ratios), speed_max=max(ratios))


def print_table(cases: list[Case]) -> list[dict[str, Any]]:
    rows = []
    head = (f"{'kernel':8} {'size':28} {'spec µs':>8} {'gen µs':>8} {'gen spread':>15} {'gen/spec speed':>22} "
            f"{'keep µs':>8} {'keep/spec':>10}  outputs")
    print(head)
    print("-" * len(head))
    for c in cases:
        s, g = summary(c, "specialized"), summary(c, "generic")
        k = summary(c, "generic_keep") if "generic_keep" in c.times else None
        row = dict(kernel=c.kernel, size=c.size, specialized=s, generic=g, generic_keep=k, keep_one=list(c.keep_one),
                   outputs=c.outputs, memory_ops={n: list(v) for n, v in c.memory.items()})
        rows.append(row)
        keep_cols = (f"{k['median_us']:8.2f} {100 * k['speed']:9.1f}%" if k else f"{'n/a':>8} {'n/a':>10}")
        print(f"{c.kernel:8} {c.size:28} {s['median_us']:8.2f} {g['median_us']:8.2f} "
              f"{g['p25_us']:6.2f}-{g['p75_us']:<8.2f} {100 * g['speed']:6.1f}% ({100 * g['speed_min']:.1f}-"
              f"{100 * g['speed_max']:.1f}%) {keep_cols}  "
              + ", ".join(f"{n}: {v}" for n, v in c.outputs.items()))
    return rows


def print_goal(rows: list[dict[str, Any]]) -> bool:
    below = [r for r in rows if r["generic"]["speed"] < GOAL]
    print(f"\ngoal: generic variant >= {100 * GOAL:.0f}% of the specialized variant's speed at every size: "
          f"{'PASS' if not below else 'FAIL'} ({len(rows) - len(below)} of {len(rows)} sizes)")
    for r in below:
        k = r["generic_keep"]
        keep = (f"generic_keep={tuple(r['keep_one'])} gives {100 * k['speed']:.1f}% "
                f"({'recovers it' if k['speed'] >= GOAL else 'does not recover it'})" if k
                else "no int of this launch is folded to 1: generic_keep cannot help")
        mem = r["memory_ops"]
        why = ", ".join(f"{n} {v[0]} of {v[1]}" for n, v in mem.items())
        print(f"  below: {r['kernel']} {r['size']}: {100 * r['generic']['speed']:.1f}% "
              f"({r['specialized']['median_us']:.2f} vs {r['generic']['median_us']:.2f} µs); {keep}; "
              f"vectorized global loads/stores: {why}")
    inexact = [r for r in rows if r["kernel"] != "RMSNorm" and any(v != "exact" for v in r["outputs"].values())]
    for r in inexact:
        print(f"  OUTPUT DIFFERS: {r['kernel']} {r['size']}: {r['outputs']}")
    return not inexact


def run_dry(args: argparse.Namespace) -> int:
    """Build every case on the CPU and compile each variant for cuda:90 (dry launches)."""
    import torch
    from triton import knobs

    from zerojit.compile_only import compile_only

    if args.cache_dir:
        knobs.cache.dir = args.cache_dir
    with compile_only("cuda:90"):
        cases = build(args, torch.device("cpu"))
        for c in cases:
            for name, fn in c.variants.items():
                fn[c.grid](**c.args)  # compiles under compile-only, launches nothing
            inspect_variants(c)
            mem = ", ".join(f"{n} {v[0]}/{v[1]}" for n, v in c.memory.items())
            print(f"{c.kernel:8} {c.size:28} compiled; vectorized global loads/stores: {mem}"
                  + (f" (keep_one={c.keep_one})" if c.keep_one else ""))
    print(f"{len(cases)} cases: every variant compiles for cuda:90")
    return 0


def build(args: argparse.Namespace, device: Any) -> list[Case]:
    cases = []
    mla = [k for k in args.kernels if k != "RMSNORM"]
    if mla:
        cases += mla_cases(tuple(mla), device=device, quick=args.quick, seed=args.seed)
    if "RMSNORM" in args.kernels:
        cases += rmsnorm_cases(device=device, quick=args.quick)
    return cases


def run_timed(args: argparse.Namespace) -> int:
    import torch

    device = torch.device("cuda")
    cases = build(args, device)
    flush = torch.empty(FLUSH_BYTES, dtype=torch.int8, device=device)
    for c in cases:
        check_outputs(c)
        inspect_variants(c)
        time_case(c, rounds=args.rounds, reps=args.reps, flush=flush)
        print(f"timed {c.kernel} {c.size}", file=sys.stderr, flush=True)
    print(f"GPU: {torch.cuda.get_device_name()}; {args.rounds} rounds x {args.reps} launches per variant, "
          "interleaved, L2 flushed before each\n")
    rows = print_table(cases)
    exact = print_goal(rows)
    if args.json:
        from zerojit.outputs import write_output

        write_output(args.json, json.dumps(dict(goal=GOAL, rounds=args.rounds, reps=args.reps,
                                                gpu=torch.cuda.get_device_name(), rows=rows), indent=1))
    return 0 if exact else 1


KERNEL_CHOICES = ("K1", "K2", "K3", "K4", "K5", "K6", "K7", "RMSNORM")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    try:
        import zerojit  # noqa: F401
    except ImportError:  # run from a source tree without PYTHONPATH=src
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from zerojit.outputs import output_problem

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="Details (cases, timing method): the module docstring.")
    parser.add_argument("--quick", action="store_true", help="benchmarks/kernels.py's goal sizes, fewer RMSNorm sizes")
    parser.add_argument("--kernels", default=",".join(KERNEL_CHOICES),
                        help=f"comma-separated subset of {', '.join(KERNEL_CHOICES)} (default: all)")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds (default 10)")
    parser.add_argument("--reps", type=int, default=100, help="timed launches per variant and round (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="benchmarks/kernels.py's seed (default 0)")
    parser.add_argument("--json", help="also write every measurement here")
    parser.add_argument("--dry", action="store_true",
                        help="no GPU: build the cases on the CPU and compile every variant for cuda:90")
    parser.add_argument("--cache-dir", help="with --dry: Triton's cache folder (default: Triton's)")
    args = parser.parse_args(argv)
    ks = [k.strip().upper() for k in args.kernels.split(",") if k.strip()]
    unknown = [k for k in ks if k not in KERNEL_CHOICES]
    if unknown:
        parser.error(f"--kernels: unknown {unknown}; choose among {', '.join(KERNEL_CHOICES)}")
    if args.rounds < 2 or args.reps < 1:
        parser.error("--rounds must be >= 2 and --reps >= 1")
    if args.json and args.dry:  # (it was ignored without a word)
        parser.error("--json: --dry times nothing, so it writes nothing; drop one of them")
    if args.json and (problem := output_problem(args.json)):  # not after the timed rounds
        parser.error(f"--json {args.json}: cannot write there: {problem}")
    args.kernels = [k for k in KERNEL_CHOICES if k in ks]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.dry:
        return run_dry(args)
    import torch

    if not torch.cuda.is_available():
        print("generic_speed.py: needs a CUDA GPU (none is visible); without one, --dry compiles every variant "
              "for cuda:90", file=sys.stderr)
        return 2
    return run_timed(args)


if __name__ == "__main__":
    sys.exit(main())
