"""Which cache entries a key space needs, known before anything is compiled.

A pull must know each key's Triton cache entry (the folder name: the base 32 of Triton's cache
key hash) before the warm-up compiles it, and so must ``store status``. :func:`entry_names` runs
each key's warm-up launch (``kernel.compile(key)``, the path a warm-up takes) only as far as
Triton's ``jit_cache_hook``, which Triton calls on an in-process miss with the exact
``ASTSource`` arguments and compile options it is about to compile; the hook computes the disk
cache key from them (:func:`zerojit.triton_compat.disk_cache_hash`: Triton's own
``get_cache_key``, the hashing a compile does) and ends the launch, so nothing is compiled or
cached. A key already in the in-process cache names its compiled variant's entry instead.

Costs Triton's build hash once per process (:func:`zerojit.cache.use_fast_triton_key`,
remembered across processes) and about a warm-up launch per key. An autotuned kernel's configs
are all named: its key space holds one key per config that survives pruning
(:class:`zerojit.autotune.TunedKey`, ``TritonJitKernel.tuned_keys``), each a job of its own
whose launch is forced to that config, and a warm-up launch compiles exactly once
(``TritonJitKernel.compile`` refuses any other count), so ending it at the first compile
request misses nothing.
"""

from __future__ import annotations

from typing import Any, Sequence

import os

from .. import triton_compat as _tc
from ..cache import entries_of, entry_name
from ..manifest import read_manifest, warmup_plan

__all__ = ["entry_names", "key_space_jobs"]


def key_space_jobs(registry: Any, config: Any = None, manifest: str | os.PathLike | None = None) -> tuple[list, list]:
    """The ``(kernel, key)`` jobs a ``registry.warmup(config, manifest=...)`` would run, first its
    own steps (the manifest's kernels registered, :func:`zerojit.manifest.warmup_plan`; every
    kernel's keys, :meth:`~zerojit.registry.JitWarmupRegistry.warmup_keys`), and what it would
    report as skipped or failed (manifest skips, listing failures).

    Raises:
        zerojit.manifest.ManifestError, OSError: as ``warmup(manifest=...)``.
    """
    skipped: list = []
    if manifest is not None:
        recorded, skipped, _ = warmup_plan(read_manifest(manifest, to_run=True), where=os.fspath(manifest))
        for kernel in recorded:
            registry.register(kernel)
    plan, failures = registry.warmup_keys(config)
    return [(kernel, key) for kernel, keys in plan.items() for key in keys], [*skipped, *failures]


class _Named(BaseException):  # ends a warm-up launch at Triton's hook (not an Exception: nothing catches it)
    pass


def entry_names(jobs: Sequence[tuple[Any, Any]]) -> list[str | None]:
    """The cache entry of each ``(kernel, key)`` of ``jobs`` for the current target (run inside
    the compile-only block of the warm-up's target), in order; None for a key whose launch
    failed or reached no Triton compile (its warm-up will say why)."""
    named: list[str] = []
    previous = _tc.get_cache_hook()

    def hook(*, fn: Any, compile: dict, **_: Any) -> Any:
        request = _tc.hook_compile_request(compile)
        src = _tc.ast_source(_tc.hook_jit_function(fn), request.signature, request.constants, request.attrs)
        named.append(entry_name(_tc.disk_cache_hash(src, _tc.current_target(), _tc.hook_compile_options(compile))))
        raise _Named()

    out: list[str | None] = []
    _tc.set_cache_hook(hook)
    try:
        for kernel, key in jobs:
            named.clear()
            try:
                variant = kernel.compile(key)
            except _Named:
                out.append(named[0])
                continue
            except Exception:  # the warm-up reports it
                out.append(None)
                continue
            try:  # in the in-process cache already: its own entry
                out.append(next(iter(entries_of([variant]))))
            except Exception:
                out.append(None)
    finally:
        _tc.set_cache_hook(previous)
    return out
