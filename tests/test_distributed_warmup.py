"""Sharded warm-up across ``torch.distributed`` ranks (gloo, CPU, compile-only cuda:90).

Two ranks warm the DSv4-like model's 21 keys with ``warmup(group=WORLD)``: each compiles about
half (Triton's listener in each rank), then every rank has all 21 loaded (the others' keys
restored from their restore records) and serves them with zero runtime compiles. With one shared cache folder the ranks only need a barrier; with a folder
per rank the compiled entries travel through ``all_gather_object``.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

import json
import re

import torch.multiprocessing as mp

ENTRY = re.compile(r"^[A-Z2-7]+$")
WORLD = 2


def _rank(rank: int, init_file: str, caches: list[str], out: str, read_only_probe: bool = False) -> None:
    os.environ["TRITON_CACHE_DIR"] = caches[rank]
    import datetime

    import torch.distributed as dist
    from triton import knobs

    if read_only_probe and rank == 0:  # rank 0's cache folder refuses new files, as a read-only mount does
        import builtins
        import errno

        real_open = builtins.open

        def refusing_open(file, mode="r", *args, **kwargs):
            if "/.zerojit/probe-" in str(file) and any(c in mode for c in "wxa"):
                raise OSError(errno.EROFS, "Read-only file system", str(file))
            return real_open(file, mode, *args, **kwargs)

        builtins.open = refusing_open

    from zerojit.compile_only import compile_only
    from zerojit.monitor import JitMonitor
    from zerojit.runner.config import load_config
    from zerojit.runner.model import register_model

    # a deadline for every collective: a rank left waiting fails the test in minutes, not 30
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=180))
    events: list[bool] = []
    knobs.compilation.listener = lambda *, cache_hit, **_: events.append(cache_hit)
    config = load_config("dsv4-like")
    registry = register_model(config)
    with compile_only("cuda:90"):
        report = registry.warmup(config, group=dist.group.WORLD, progress=False, target="cuda:90", generic=False)
        with JitMonitor("error", report=report) as monitor:
            for kernel, keys in registry.warmup_keys(config)[0].items():
                for key in keys:
                    kernel(**kernel.warmup_inputs(key))
    counts = monitor.counts()
    entries = [e for e in os.listdir(caches[rank]) if ENTRY.match(e)]
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"keys": report.num_keys, "ok": report.ok, "compiled": events.count(False),
                   "loaded": events.count(True), "entries": len(entries), "runtime_compiles": counts.runtime_compiles,
                   "launches": counts.launches, "restored": report.stats.restored,
                   "disk_loads": report.stats.disk_loads}, f)
    dist.destroy_process_group()


def run_ranks(tmp_path, caches: list[str], read_only_probe: bool = False) -> list[dict]:
    mp.spawn(_rank, args=(str(tmp_path / "init"), caches, str(tmp_path), read_only_probe), nprocs=WORLD, join=True)
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]


def check(results: list[dict]) -> None:
    for r in results:
        assert r["ok"] and r["keys"] == 21
        assert r["runtime_compiles"] == 0 and r["launches"] == 21  # every key loaded on every rank
    compiled = [r["compiled"] for r in results]
    assert sum(compiled) == 21 and sorted(compiled) == [10, 11]  # each key compiled once, sharded


def test_ranks_sharing_a_cache_folder_compile_half_each(tmp_path):
    shared = str(tmp_path / "cache")
    results = run_ranks(tmp_path, [shared, shared])
    check(results)
    # the other rank's keys come from its restore records, not from Triton's disk lookup
    assert [r["restored"] for r in results] == [21 - r["compiled"] for r in results]
    assert [r["loaded"] for r in results] == [0, 0]


def test_ranks_with_their_own_cache_folders_share_entries(tmp_path):
    results = run_ranks(tmp_path, [str(tmp_path / "cache0"), str(tmp_path / "cache1")])
    check(results)
    assert [r["entries"] for r in results] == [21, 21]  # each folder got the other rank's entries
    assert [r["restored"] for r in results] == [21 - r["compiled"] for r in results]  # ... and loads them


def test_a_rank_0_that_cannot_write_its_probe_file_treats_the_folders_as_not_shared(tmp_path):
    """Rank 0's probe file cannot be written (a read-only cache folder): before the fix rank 0
    raised before the barrier and rank 1 waited there for the group's timeout. Now both finish,
    the entries travel as between separate folders, and every key serves on both ranks."""
    shared = str(tmp_path / "cache")
    results = run_ranks(tmp_path, [shared, shared], read_only_probe=True)
    check(results)
    assert not [n for n in os.listdir(os.path.join(shared, ".zerojit")) if n.startswith("probe-")]
