"""Warm-start cost of zerojit's damage checks (``zerojit.integrity``) on the 21-key ``dsv4-like``
space, compile-only (``cuda:90``: real cubins, nothing loaded).

One cold warm-up into a fresh cache folder, then the restore of all 21 keys from the index
(``zerojit.restore.restore_variants``, what a warm start runs) 8 x 20 times with the checks
(each key's group file, digests, metadata and cubin checked) and 8 x 20 times with plain reads
instead, interleaved so the machine's load falls on both alike; the minimum of each is printed,
and the SHA-256 of the 21 cubins alone.

Usage::

    PYTHONPATH=src python benchmarks/digest_cost.py
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help; no options
    cache = tempfile.mkdtemp(prefix="zerojit-digest-cost-")
    os.environ["TRITON_CACHE_DIR"] = cache
    try:
        measure()
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def measure() -> None:
    from zerojit import integrity, restore
    from zerojit import triton_compat as tc
    from zerojit.compile_only import compile_only
    from zerojit.precompile import plan_digest
    from zerojit.runner.config import load_config
    from zerojit.runner.model import register_model

    def plain_read(path: str, digests: object = None) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    with compile_only("cuda:90"):
        config = load_config("dsv4-like")
        registry = register_model(config)
        cold = registry.warmup(config, workers=1, progress=False)
        plan, _ = registry.warmup_keys(config)
        jobs = [(kernel, key) for kernel, keys in plan.items() for key in keys]
        digest, target = plan_digest(jobs), tc.current_target()

        def restore_ms(n: int = 20) -> float:
            best = float("inf")
            for _ in range(n):
                for kernel, _ in jobs:
                    kernel.kernel.device_caches.clear()
                t = time.perf_counter()
                assert len(restore.restore_variants(jobs, digest, target, load=False)) == len(jobs)
                best = min(best, time.perf_counter() - t)
            return best * 1e3

        checking = (restore.read_checked, restore.read_group_file, restore.digests_of)
        plain = (plain_read, tc.read_group_file, lambda folder: {})
        checked, unchecked = [], []
        for _ in range(8):
            checked.append(restore_ms())
            restore.read_checked, restore.read_group_file, restore.digests_of = plain
            unchecked.append(restore_ms())
            restore.read_checked, restore.read_group_file, restore.digests_of = checking
        cubins = [open(p, "rb").read() for v in cold.variants for n, p in v.compiled.metadata_group.items()
                  if n.endswith(".cubin")]
        t = time.perf_counter()
        for _ in range(50):
            for data in cubins:
                integrity.sha256(data)
        hashing = (time.perf_counter() - t) / 50 * 1e3
    c, u, keys = min(checked), min(unchecked), len(jobs)
    print("compile-only (cuda:90, no GPU used): real cubins, nothing loaded")
    print(f"{keys} keys, {len(cubins)} cubins of {sum(map(len, cubins))} bytes; SHA-256 of them all: {hashing:.2f} ms")
    print(f"restore: checked {c:.2f} ms ({c / keys * 1e3:.0f} us a key), plain reads {u:.2f} ms "
          f"({u / keys * 1e3:.0f} us a key): +{(c - u) / keys * 1e3:.0f} us a key")


if __name__ == "__main__":
    main()
