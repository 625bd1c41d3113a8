"""Start-up of a tensor-parallel group: every rank warming alone vs ``warmup(group=...)``.

``--ranks`` processes (``torch.multiprocessing``; NCCL with one GPU per rank when there are
enough GPUs, else gloo and compile-only ``--target``) warm the key space of
``benchmarks/warmup.py`` (``--space``), cold, in three modes, each with fresh cache folders:

* ``alone``: every rank ``warmup(workers=W)`` into its own cache folder (each compiles every key:
  what an engine does today, one process per GPU);
* ``group-shared``: ``warmup(group=WORLD, workers=W)``, one cache folder for all ranks (each rank
  compiles its share, a barrier, every rank loads all);
* ``group-separate``: the same with one cache folder per rank (compiled entries travel through
  ``all_gather_object``).

Printed: the slowest rank's warm-up seconds, the compiles summed over ranks (Triton's listener in
each rank plus its workers), and the speed-up over ``alone``. ``W`` is ``--workers`` (default:
CPU count / ranks).

NVLink multicast stays off (:data:`NO_MULTICAST`, set before any process group starts): the
device notes of the GPU machines this runs on ask for it, since a program using it can put a
host's shared GPUs out of service.

Usage: ``PYTHONPATH=src python benchmarks/distributed_warmup.py [--ranks 2] [--space dsv4-like] [--json OUT]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

MODES = ("alone", "group-shared", "group-separate")
#: NVLink multicast off in NCCL, PyTorch's symmetric memory and NVSHMEM (the GPU machines' device
#: notes: a program that uses it can put the host's GPUs, which others share, out of service).
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def _rank(rank: int, args: argparse.Namespace, mode: str, root: str) -> None:
    import time

    import torch

    os.environ.update(NO_MULTICAST)  # (inherited from main too; set here before the group starts)
    shared = mode == "group-shared"
    os.environ["TRITON_CACHE_DIR"] = os.path.join(root, "cache" if shared else f"cache{rank}")
    import contextlib

    import torch.distributed as dist
    from triton import knobs

    from warmup import key_space
    from zerojit.compile_only import compile_only

    gpu = torch.cuda.is_available() and torch.cuda.device_count() >= args.ranks and not args.target
    if gpu:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if gpu else "gloo", init_method=f"file://{root}/init", rank=rank,
                            world_size=args.ranks)
    registry = key_space(args.space)
    events = []
    target = None if gpu else (args.target or "cuda:90")
    with (compile_only(target) if target else contextlib.nullcontext()):
        from triton.runtime.driver import driver

        driver.active.get_current_device()  # the driver's start (and CUDA's context) is not warm-up
        if gpu:
            torch.empty(1, device="cuda")
        knobs.compilation.listener = lambda *, cache_hit, **_: events.append(cache_hit)
        dist.barrier()
        start = time.perf_counter()
        report = registry.warmup(workers=args.workers, progress=False, target=target or "device",
                                 group=None if mode == "alone" else dist.group.WORLD)
        seconds = time.perf_counter() - start
    with open(os.path.join(root, f"rank{rank}.json"), "w") as f:
        json.dump({"seconds": seconds, "keys": report.num_keys,
                   "compiled": events.count(False) + report.stats.worker_compiled,
                   "target": target or "device"}, f)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--space", default="dsv4-like", help="matrix or a shipped config name (see warmup.py)")
    parser.add_argument("--workers", type=int, default=None, help="compile worker processes per rank")
    parser.add_argument("--target", default=None, help="compile-only target (default: the GPUs, else cuda:90)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    if args.ranks < 1:  # each refused before any rank starts (--ranks 0 was a ZeroDivisionError)
        parser.error(f"--ranks must be >= 1, got {args.ranks}")
    if args.workers is not None and args.workers < 1:  # (0 silently meant the default)
        parser.error(f"--workers must be >= 1, got {args.workers}")
    from zerojit.outputs import output_problem, write_output

    if args.json and (problem := output_problem(args.json)):  # not after minutes of measuring
        parser.error(f"--json {args.json}: cannot write there: {problem}")
    args.workers = args.workers or max(1, (os.cpu_count() or 1) // args.ranks)
    os.environ.update(NO_MULTICAST)  # before any rank starts: they inherit it

    import torch.multiprocessing as mp

    results = {}
    for mode in MODES:
        with tempfile.TemporaryDirectory(prefix="zerojit-dist-") as root:
            mp.spawn(_rank, args=(args, mode, root), nprocs=args.ranks, join=True)
            ranks = [json.load(open(os.path.join(root, f"rank{r}.json"))) for r in range(args.ranks)]
        results[mode] = {"seconds": max(r["seconds"] for r in ranks), "compiled": sum(r["compiled"] for r in ranks),
                         "keys": ranks[0]["keys"], "target": ranks[0]["target"]}
    first = results["alone"]
    print(f"{args.ranks} ranks, key space {args.space!r} ({first['keys']} keys), target {first['target']}, "
          f"{args.workers} compile workers per rank")
    print(f"{'mode':<16}{'slowest rank s':>16}{'compiles (all ranks)':>22}{'speed-up':>10}")
    for mode in MODES:
        r = results[mode]
        print(f"{mode:<16}{r['seconds']:>16.2f}{r['compiled']:>22}{first['seconds'] / r['seconds']:>9.1f}x")
    if args.json:
        write_output(args.json, json.dumps({"args": vars(args), "results": results}, indent=2))


if __name__ == "__main__":
    main()
