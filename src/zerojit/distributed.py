"""Warm-up across the ranks of a ``torch.distributed`` group: shard the compiles, share the results.

Every rank of a tensor-parallel group needs the same kernels, so compiling them on every rank is
wasted work. ``registry.warmup(group=...)`` (which calls :func:`sharded_warmup`):

1. checks that every rank has the same key space (same kernels, same keys, same order);
2. finds out whether the ranks share one Triton cache folder (rank 0 writes a probe file there,
   the others look for it in theirs);
3. has each rank compile its round-robin share of the keys (key ``i`` on rank ``i % world``,
   with its own worker processes when ``workers > 1``), under the per-entry file locks;
4. shares the results in one ``all_gather_object`` (also the barrier after the compiles): each
   rank's Triton build hash, the restore records of its share (:func:`zerojit.restore.records`)
   and, when the cache folders are separate, the cache entries it compiled, which the others
   install (:func:`zerojit.cache.install_entries`: staged, verified, moved in whole);
5. has every rank load every key: its own share is loaded already; the others' keys are
   restored from their records (:func:`zerojit.restore.restore_records`: module, function and
   launcher on a GPU, no Triton lookup); anything left warms up normally (disk-cache hits).

Ranks whose Triton builds differ (another wheel or Python) do not install each other's entries,
which would be unreachable anyway; they compile what they lack in step 5. A key that fails on
its rank in step 3 is tried again by every rank in step 5, so every rank reports the same
failures. Object collectives on an NCCL group need each rank's current CUDA device set.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid
from typing import Any, Sequence

from .cache import cache_dir, entries_of, install_entries, pack_entries, use_fast_triton_key
from .compile_only import warm_target
from .reports import count
from .precompile import JobOutcome, plan_digest
from .restore import records, restore_records

__all__ = ["DistributedWarmupError", "sharded_warmup", "shard"]


class DistributedWarmupError(RuntimeError):
    """The ranks cannot warm up together (torch.distributed not initialised, different key spaces)."""


def shard(num_jobs: int, rank: int, world: int) -> list[int]:
    """The job indices rank ``rank`` of ``world`` compiles: ``rank, rank + world, ...``."""
    return list(range(rank, num_jobs, world))


def _write_probe(folder: str) -> str | None:
    """The name of a new empty file in ``folder``'s ``.zerojit`` folder, or None where none can be
    written (a read-only cache folder: a warm one still serves, from its entries)."""
    name = f"probe-{uuid.uuid4().hex}"
    try:
        os.makedirs(os.path.join(folder, ".zerojit"), exist_ok=True)
        open(os.path.join(folder, ".zerojit", name), "x").close()
    except OSError:
        return None
    return name


def sharded_warmup(session: Any, jobs: Sequence[tuple[Any, Any]], group: Any, *, progress: bool = False) -> list:
    """Warm ``jobs`` on every rank of ``group``, compiling each key on one rank only.

    Args:
        session: the warm-up's :class:`zerojit.precompile.WarmupSession` (already entered).
        jobs: ``(kernel, key)`` pairs, identical on every rank.
        group: a ``torch.distributed`` process group (``torch.distributed.group.WORLD`` for all).

    Returns one :class:`zerojit.precompile.JobOutcome` per job (from the loading pass; a key's
    seconds include its compile on its own rank).

    Raises:
        DistributedWarmupError: torch.distributed is not initialised, or the ranks' key spaces
            differ (the message names the ranks).
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise DistributedWarmupError("warmup(group=...) needs torch.distributed initialised (init_process_group)")
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    folder = cache_dir()

    # 1-2. one exchange: each rank's key space, build, and whether it sees rank 0's probe file.
    # Rank 0 writes the probe before the broadcast, which names it (None: it could not be written,
    # a read-only cache folder: the folders count as not shared); no rank raises between the
    # broadcast and the gather, else the others would wait at the barrier until the group's timeout.
    probe = [_write_probe(folder) if rank == 0 else None]
    dist.broadcast_object_list(probe, group=group, group_src=0)
    probe_path = os.path.join(folder, ".zerojit", probe[0]) if probe[0] is not None else None
    try:
        dist.barrier(group=group)
        mine = {"plan": plan_digest(jobs), "keys": len(jobs),
                "shared": probe_path is not None and os.path.exists(probe_path)}
        facts: list[Any] = [None] * world
        dist.all_gather_object(facts, mine, group=group)
    finally:
        if rank == 0 and probe_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(probe_path)
    differ = [r for r, f in enumerate(facts) if f["plan"] != facts[0]["plan"]]
    if differ:
        raise DistributedWarmupError(
            f"ranks {differ} have another key space than rank 0 ({[facts[r]['keys'] for r in differ]} keys vs "
            f"{facts[0]['keys']}): every rank must register the same kernels and requests before warmup(group=...)"
        )
    shared = all(f["shared"] for f in facts)

    # 3. compile (and load) this rank's share (Triton's build hash overlaps the workers' boot there)
    share = shard(len(jobs), rank, world)
    first = session.run([jobs[i] for i in share], progress=progress,
                        desc=f"zerojit warm-up, rank {rank}: {len(share)} of {count(len(jobs), 'key')}")

    # 4. share the results: Triton's build, this share's restore records, and (separate cache
    # folders) its entries; the exchange is also the barrier after every rank's compiles

    target, dry = warm_target()
    build = hashlib.sha256(use_fast_triton_key().encode()).hexdigest()
    done = {i: o.variant for i, o in zip(share, first) if o.error is None}
    message = {"build": build, "records": records(jobs, done, target) if target is not None else None, "entries": {}}
    if not shared:
        compiled = [v for v in done.values() if getattr(v, "compiled", None) is not None]
        try:
            message["entries"] = pack_entries(entries_of(compiled))
        except Exception:  # nothing to share beats a wrong share; the others compile what they lack
            pass
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, message, group=group)

    # 5. load everything: this rank's share is loaded; the others' keys are restored from their
    # records (zerojit.restore); whatever is left (a failed key, a stale record) warms up normally
    outcomes: list[Any] = [None] * len(jobs)
    for i, o in zip(share, first):
        outcomes[i] = o
    for r, theirs in enumerate(gathered):
        if r == rank or theirs["build"] != build:
            continue
        if theirs["entries"]:
            install_entries(theirs["entries"])
        for i, (variant, seconds) in restore_records(jobs, theirs["records"], target, load=not dry).items():
            if outcomes[i] is None:
                outcomes[i] = JobOutcome(variant, seconds, None)
                with session._lock:
                    session.counts.restored += 1
    rest = [i for i, o in enumerate(outcomes) if o is None]
    if rest:
        ran = session.run([jobs[i] for i in rest], progress=progress,
                          desc=f"zerojit warm-up, rank {rank}: loading {count(len(rest), 'key')}", expect_warm=True)
        for i, o in zip(rest, ran):
            outcomes[i] = o
    return outcomes

