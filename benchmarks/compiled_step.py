"""``torch.compile(fullgraph=True)`` of a dsv4-like mixed step through the seven kernels' custom ops.

The step is the runner's (:func:`zerojit.runner.metadata.step_metadata`): decodes of
``1 + num_speculative_tokens`` tokens and prefills (one long, one continuing), so every kernel
runs (K1-K7, K3 with drafts, K6's causal and draft rows). Its kernels are
``torch.ops.zerojit.*`` (:mod:`zerojit.kernels.mla.ops`) instead of the launchers; the model is
built and warmed as ``zerojit run`` does, then the compiled step runs under the monitor in error
mode (a runtime compile raises). Printed: graph breaks, graphs, runtime compiles, and whether the
outputs equal the eager step's (on a GPU: bit for bit; on CPU, compile-only, launches are dry, so
only names, shapes and dtypes are compared).

    python benchmarks/compiled_step.py                  # cuda, backend inductor
    python benchmarks/compiled_step.py --device cpu     # compile-only (cuda:90), dry launches

Exit status: 0 when there were no graph breaks, no runtime compiles and equal outputs; 1 otherwise; 2 invalid
input (no GPU for --device cuda, --mode without inductor, TRITON_INTERPRET=1 with --device cpu).
Only public APIs of PyTorch 2.11 are used here (torch_compat reads Dynamo's counters).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

import torch

from zerojit import torch_compat
from zerojit.compile_only import compile_only
from zerojit.kernels.mla.backends import KERNEL_NAMES
from zerojit.kernels.mla.ops import OPS
from zerojit.monitor import JitMonitor
from zerojit.registry import JitWarmupRegistry
from zerojit.runner import engine
from zerojit.runner.config import load_config
from zerojit.runner.kv_cache import allocate_kv_cache
from zerojit.runner.metadata import KERNELS, DecodeBuffers, MetadataOps, MetadataPlan, build_step_inputs, step_metadata
from zerojit.runner.model import SparseMLAModel
from zerojit.runner.scheduler import Batch

#: The step's kernels as custom ops, called as the launchers are.
CUSTOM_OPS = MetadataOps(name="custom ops", **{KERNEL_NAMES[k]: op for k, op in OPS.items()})


def mixed_batch(query_len: int) -> Batch:
    """Four speculative decodes, a 300-token prompt and a 17-token continuing prefill."""
    decodes = 4
    return Batch(step=0, request_ids=tuple(range(decodes + 2)), query_lens=(query_len,) * decodes + (300, 17),
                 seq_lens=tuple(query_len + 40 + i for i in range(decodes)) + (300, 529), num_decodes=decodes)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--backend", default=None, help="torch.compile backend (default: inductor on cuda, "
                   "aot_eager on cpu; inductor runs on cpu too: docs/engine-modes.md)")
    p.add_argument("--mode", default=None, help="torch.compile mode (e.g. reduce-overhead: Inductor's CUDA graphs, "
                   "not part of the issue's proof; docs/engine-modes.md); backend inductor only")
    p.add_argument("--config", default="dsv4-like")
    p.add_argument("--fill", action="store_true", help="on cpu: compute the inputs' values too (as on a GPU), "
                   "so the step's host-side tensor building is traced as on a GPU; launches stay dry")
    p.add_argument("--repeats", type=int, default=20, help="timed steps, eager and compiled (cuda)")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("compiled_step: --device cuda needs a GPU (use --device cpu for a compile-only run)", file=sys.stderr)
        return 2
    backend = args.backend or ("inductor" if args.device == "cuda" else "aot_eager")
    if args.mode is not None and backend != "inductor":  # other backends ignore torch.compile's mode
        print(f"compiled_step: --mode {args.mode} needs --backend inductor (backend {backend} ignores torch.compile's "
              "mode)", file=sys.stderr)
        return 2
    if args.device == "cpu" and os.environ.get("TRITON_INTERPRET") == "1":  # compile_only would refuse it later
        print("compiled_step: --device cpu runs compile-only (cuda:90, dry launches), which needs a process without "
              "TRITON_INTERPRET=1: unset it", file=sys.stderr)
        return 2
    dev = torch.device(args.device)
    cfg = load_config(args.config)
    fill = dev.type == "cuda" or args.fill
    mode = compile_only("cuda:90") if dev.type == "cpu" else contextlib.nullcontext()
    with mode:
        registry = JitWarmupRegistry()
        with registry.activate():
            model = SparseMLAModel(cfg, None)
            cache = allocate_kv_cache(cfg, engine.kv_blocks_per_rank(cfg, 1 << 16) * cfg.dcp_size, device=dev)
            model.bind_kv_cache(cache)
        t0 = time.perf_counter()
        report = registry.warmup(cfg, progress=False)
        print(f"warm-up: {len(report.variants)} variants in {time.perf_counter() - t0:.1f} s")
        plan = MetadataPlan.for_cache(cfg, model.backend, cache)
        batch = mixed_batch(cfg.query_len)
        inputs = build_step_inputs(batch, plan, blocks=engine._primer_blocks(batch, plan) if fill else None,
                                   fill=fill, device=dev)
        eager_buffers = DecodeBuffers.allocate(plan, device=dev, fill=-7)
        compiled_buffers = DecodeBuffers.allocate(plan, device=dev, fill=-7)

        def step(step_inputs):
            return step_metadata(step_inputs, plan, CUSTOM_OPS, compiled_buffers).outputs

        torch_compat.reset_dynamo()
        compiled = torch.compile(step, fullgraph=True, backend=backend, mode=args.mode)
        with JitMonitor("error", report=report) as eager_monitor:
            want = step_metadata(inputs, plan, KERNELS, eager_buffers)
        # torch.compile's own compile (Dynamo's trace; with Inductor, Inductor's Triton kernels for the
        # code around the ops, which zerojit's key space does not hold) is start-up, as an engine
        # compiles its model before serving: the first call runs before the monitor, and the call it
        # watches must compile nothing.
        t0 = time.perf_counter()
        compiled(inputs)
        print(f"torch.compile's first call (trace and {backend} code generation): {time.perf_counter() - t0:.1f} s")
        with JitMonitor("error", report=report) as monitor:
            got = compiled(inputs)
            if dev.type == "cuda":
                torch.cuda.synchronize()
        counts = torch_compat.dynamo_counts()
        snap = monitor.snapshot()
        compiles = sum(m.misses for m in (*snap.misses, *snap.direct))  # error mode: each raised before compiling
        launches = sum(launch.count for launch in snap.launches)
        eager_launches = sum(launch.count for launch in eager_monitor.snapshot().launches)
        ran = sorted({name.split()[0] for name in want.outputs})
        print(f"kernels run: {', '.join(ran)} ({len(want.outputs)} outputs)")
        how = f"backend {backend}" + (f", mode {args.mode}" if args.mode else "")
        print(f"{how}: graph breaks {counts['graph_breaks']}, graphs {counts['unique_graphs']}, "
              f"runtime compiles {compiles}, warmed-variant launches {launches} (eager: {eager_launches})")
        for reason in torch_compat.graph_break_reasons():
            print(f"  graph break: {reason}")
        problems = []
        if set(got) != set(want.outputs):
            problems.append(f"outputs {sorted(set(got) ^ set(want.outputs))} in only one of the two")
        for name in want.outputs:
            a, b = got.get(name), want.outputs[name]
            if a is None:
                continue
            if (a.shape, a.dtype) != (b.shape, b.dtype):
                problems.append(f"{name}: {tuple(a.shape)} {a.dtype} vs eager {tuple(b.shape)} {b.dtype}")
            elif dev.type == "cuda" and not torch.equal(a, b):
                problems.append(f"{name}: values differ from eager")
        what = "bit-equal" if dev.type == "cuda" else "same names, shapes and dtypes (dry launches: no values)"
        print(f"outputs vs eager: {what if not problems else 'DIFFERENT'}")
        for line in problems:
            print(f"  {line}")
        if dev.type == "cuda":
            for label, fn in (("eager", lambda: step_metadata(inputs, plan, KERNELS, eager_buffers)),
                              ("compiled", lambda: compiled(inputs))):
                times = []
                for _ in range(args.repeats):
                    torch.cuda.synchronize()
                    t = time.perf_counter()
                    fn()
                    torch.cuda.synchronize()
                    times.append(time.perf_counter() - t)
                print(f"median step, {label}: {sorted(times)[len(times) // 2] * 1e3:.3f} ms")
        ok = counts["graph_breaks"] == 0 and not problems and not compiles and launches == eager_launches
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
