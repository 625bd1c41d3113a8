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
from ..context import WARMUP_SINK
from ..generic import plan as generic_plan
from ..kernel import CompiledVariant
from ..manifest import read_manifest, warmup_plan
from ..specialization import bind, spec_classes

__all__ = ["entry_names", "needed_entry_names", "key_space_jobs"]


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


def _name_jobs(jobs: Sequence[tuple[Any, Any]]) -> tuple[list[str | None], list[CompiledVariant | None]]:
    """Each job's cache entry, and a stand-in for the variant its warm-up would make (its
    Triton in-process key and specialization classes, nothing compiled: what
    :func:`zerojit.generic.plan` reads), None for a job whose launch failed."""
    named: list[tuple[str, str, tuple]] = []
    previous = _tc.get_cache_hook()

    def hook(*, key: Any, fn: Any, compile: dict, **_: Any) -> Any:
        request = _tc.hook_compile_request(compile)
        jit_fn = _tc.hook_jit_function(fn)
        src = _tc.ast_source(jit_fn, request.signature, request.constants, request.attrs)
        name = entry_name(_tc.disk_cache_hash(src, _tc.current_target(), _tc.hook_compile_options(compile)))
        sink = WARMUP_SINK.get()  # the warm-up launch put its arguments there before Triton ran
        try:  # bound as TritonJitKernel.compile binds them
            spec = spec_classes(jit_fn, bind(jit_fn, **sink[-1][1])[1]) if sink else None
        except Exception:  # its generic variant is then not named (the warm-up makes it)
            spec = None
        named.append((name, str(key), spec))
        raise _Named()

    names: list[str | None] = []
    variants: list[CompiledVariant | None] = []
    _tc.set_cache_hook(hook)
    try:
        for kernel, key in jobs:
            named.clear()
            try:
                variant = kernel.compile(key)
            except _Named:
                name, triton_key, spec = named[0]
                names.append(name)
                jit_fn = getattr(kernel, "kernel", None)
                variants.append(None if spec is None else CompiledVariant(
                    kernel.name, key, triton_key, spec, tuple(p.name for p in getattr(jit_fn, "params", ())), False))
                continue
            except Exception:  # the warm-up reports it
                names.append(None)
                variants.append(None)
                continue
            try:  # in the in-process cache already: its own entry
                names.append(next(iter(entries_of([variant]))))
                variants.append(variant)
            except Exception:
                names.append(None)
                variants.append(None)
    finally:
        _tc.set_cache_hook(previous)
    return names, variants


def entry_names(jobs: Sequence[tuple[Any, Any]]) -> list[str | None]:
    """The cache entry of each ``(kernel, key)`` of ``jobs`` for the current target (run inside
    the compile-only block of the warm-up's target), in order; None for a key whose launch
    failed or reached no Triton compile (its warm-up will say why)."""
    return _name_jobs(jobs)[0]


def needed_entry_names(jobs: Sequence[tuple[Any, Any]], *, generic: bool = True) -> list[str]:
    """Every cache entry a warm-up of ``jobs`` loads or compiles, each once: the keys'
    (:func:`entry_names`) and, with ``generic`` (``registry.warmup``'s default), the generic
    variants' (:mod:`zerojit.generic`) the warm-up makes after the keys: their jobs are planned
    by :func:`zerojit.generic.plan` from stand-ins of the keys' variants (Triton's in-process key
    and the specialization classes, both seen at the hook), then named the same way. Nothing is
    compiled. Run it where :func:`entry_names` runs.
    """
    names, variants = _name_jobs(jobs)
    if generic:
        names += entry_names(generic_plan(jobs, variants).jobs)
    return list(dict.fromkeys(n for n in names if n is not None))
