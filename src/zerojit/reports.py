"""Warm-up results as plain values: :class:`WarmupReport` (per kernel keys, compiled variants and
seconds, every failure), :class:`WarmupStats` (where the variants came from) and the errors a
warm-up raises (:class:`WarmupError`, :class:`NoTargetError`).

These are what the warm-up layer hands up to the observation layer (the monitor and the audit
read reports; docs/architecture.md). They print (``summary()``), compare and serialize
(``to_dict()``), and hold no reference to the machinery that made them, except each variant's
compiled kernel.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "KernelWarmup",
    "LEARNED_SUFFIX",
    "NoTargetError",
    "WarmupError",
    "WarmupFailure",
    "WarmupReport",
    "WarmupStats",
    "count",
]


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``"1 kernel"``, ``"2 kernels"``, ``"0 processes"`` (``plural`` when not ``noun + "s"``)."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


@dataclass(frozen=True)
class WarmupFailure:
    """One key (or a kernel's key listing, ``key=None``) that failed, with the error; ``stage``
    ``"finish"``: the kernel's :meth:`~zerojit.kernel.JitKernel.finish_warmup` after its keys
    compiled (a wrapped kernel's tuning: its tuning file, its ``tuning_inputs``)."""

    kernel: str
    key: Any
    error: str
    stage: str = ""

    def __str__(self) -> str:
        if self.stage == "finish":
            where = "finishing its warm-up (tuning)"
        else:
            where = "listing its keys" if self.key is None else f"key {self.key}"
        return f"{self.kernel}: {where}: {self.error}"


#: The name suffix of a kernel's learned keys' row (:mod:`zerojit.learned`): the same kernel.
LEARNED_SUFFIX = " (learned)"


@dataclass(frozen=True)
class KernelWarmup:
    """One kernel's part of a warm-up: its keys, compiled variants and compile seconds."""

    kernel: str
    keys: tuple[Any, ...]
    variants: tuple[Any, ...]
    seconds: float
    key_seconds: tuple[float, ...] = ()  #: each key's seconds, in ``keys`` order (empty: not recorded)
    #: an autotuned kernel's tuning keys and how its untuned ones are served
    #: (:class:`zerojit.autotune.TuningCoverage`); None for other kernels
    tuning: Any = None
    #: autotune configs of a key that cannot run here (out of resources, ptxas refused them) while
    #: another config of the key compiled: skipped, as Triton's autotuner skips them ("key: error")
    skipped_configs: tuple[str, ...] = ()


@dataclass(frozen=True)
class WarmupStats:
    """Where a warm-up's variants came from (Triton's compile events, counted by zerojit).

    Attributes:
        compiled: variants Triton compiled in this process.
        worker_compiled: variants compiled by this warm-up's worker processes (one killed as
            hung after it stored its entry included: the retry finds the entry stored).
        disk_loads: variants this process loaded from Triton's disk cache (compiled earlier, by
            its workers, by another process, or installed from a bundle).
        lock_waits: entries missing when this warm-up looked them up, then found on disk once
            this process (or one of its workers) held the entry's lock: another process compiled
            them meanwhile (this one waited for its lock, or came just after); loaded from disk.
            A hung compile's retry is one only when it waited for another process's lock.
        workers: compile worker processes started (by this warm-up, or for it by
            :meth:`JitWarmupRegistry.start_workers`).
        worker_launchers: CUDA launcher modules built by workers (on a GPU).
        launchers_remembered: CUDA launcher modules missing from the cache folder and copied
            into it from those remembered for this Triton install (built by an earlier
            warm-up's workers; see :func:`zerojit.cache.remembered_launcher`), not built again.
        recovered: what workers could not do (this process did it instead), or did only slowly
            (a kernels' module that imports torch), and each damaged cache file found (named
            once: :mod:`zerojit.integrity`), one line per cause, ending ``[N keys]`` when N keys
            gave the same line.
        bundle_entries: cache entries installed from a bundle.
        store_entries: cache entries pulled from a fleet's store (``warmup(store=...)``) and
            installed before the warm-up compiled anything; loaded from disk (in ``disk_loads``).
        restored: variants put straight into the in-process caches from zerojit's restore index
            (a warm start: no Triton lookup; see :mod:`zerojit.restore`).
        phases: wall-clock seconds per phase, in order, as ``(name, seconds)``: ``manifest``
            (a manifest warm-up: reading it and checking each recorded function against it),
            ``modules`` (importing the recorded functions' modules, and what they import:
            torch for most libraries; in the summary's first line),
            ``restore`` (the restore index), ``fork`` (forked workers: this process forking
            them, after the imports each of them would repeat), ``start`` (Triton's build key,
            hashed once per Triton install; with workers, also the first launch's one-time
            costs), ``sweep`` (every other key's warm-up launch; with workers, those that miss
            the disk cache are handed to them), ``workers`` (waiting for the workers' results),
            ``compile`` (spawned workers: keys this process compiled itself while none had
            booted yet), ``load`` (loading the workers' results, as they arrive), ``generic``
            (the generic variants' whole pass, after the keys': its own phases are in
            ``WarmupReport.generic_stats``), ``prime`` (the launch path's first launch, on a GPU). Absent phases did not run. ``imports`` (after a restore: the launch path's lazy imports, which no
            warm-up launch paid; once per process) comes right after ``restore``.
        worker_seconds: seconds the worker processes spent on their requests (kernel compiles,
            launcher builds, waiting for another process's lock), summed over workers.
        worker_cpu_seconds: the CPU time of those requests (the workers' own and their
            compiler subprocesses', ``ptxas``); much less than ``worker_seconds`` means the
            workers waited for a core (more workers than free cores).
        worker_stages: Triton's compile stages (``ir``: the front end's IR; then one per
            lowering stage, e.g. ``ttir``, ``ttgir``, ``llir``, ``ptx``, ``cubin`` (``ptxas``);
            ``store``: writing the cache entry) as ``(stage, seconds)``, summed over the workers'
            compiles (Triton's ``CompileTimes``, given to its compilation listener).
        worker_choice: how many compile worker processes the warm-up allowed, and why
            (:func:`zerojit.registry.choose_workers`), e.g. ``"4 workers (4 cores, 111 keys to
            compile)"`` or ``"in this process (all 111 keys restored)"``; ``workers`` says how
            many started.
        timeline: what the worker processes did, as ``(what, worker, start, end)`` in seconds since
            the warm-up session began (negative: workers :meth:`JitWarmupRegistry.start_workers`
            started before it), by start. A forked worker's boot (the default on Linux,
            :func:`zerojit.precompile.worker_start_method`): ``"fork"`` (this process's
            ``fork()``), ``"set-up"``; a spawned one's: ``"python"`` (from its start to its
            script's first line), ``"imports"`` (Triton's compiler, zerojit's compile-only
            driver, the kernels' modules), ``"preload"`` (a throwaway compile, only when
            neither Triton's build key nor a launcher request was waiting once its imports
            ended; see ``zerojit._compile_worker.preload``), ``"set-up"``;
            then one span per request (from when the worker was ready for it), by
            what came of it: ``"compile module:function"`` (the worker compiled it), ``"cached
            ..."`` (on disk once the worker held its lock: another process compiled it),
            ``"failed ..."``, ``"launcher launcher:<key>"``; as the parent saw it. ``worker``
            numbers the processes from 0. Empty without workers.
    """

    compiled: int = 0
    worker_compiled: int = 0
    disk_loads: int = 0
    lock_waits: int = 0
    workers: int = 0
    worker_launchers: int = 0
    launchers_remembered: int = 0
    recovered: tuple[str, ...] = ()
    bundle_entries: int = 0
    store_entries: int = 0
    restored: int = 0
    phases: tuple[tuple[str, float], ...] = ()
    worker_seconds: float = 0.0
    worker_cpu_seconds: float = 0.0
    worker_stages: tuple[tuple[str, float], ...] = ()
    timeline: tuple[tuple[str, int, float, float], ...] = ()
    worker_choice: str = ""

    def notes(self, prefix: str) -> list[str]:
        """``recovered``, one line per cause (a worker's stderr tail indented under it), each
        starting with ``prefix``: for a human-readable report."""
        indent = " " * len(prefix)
        return [prefix + note.replace("\n", "\n" + indent) for note in self.recovered]

    def to_dict(self) -> dict[str, Any]:
        """The counts as JSON-ready values; each pair list as labelled objects:
        ``phases`` ``[{"phase", "seconds"}]``, ``worker_stages`` ``[{"stage", "seconds"}]``,
        ``timeline`` ``[{"what", "worker", "start", "end"}]`` (seconds)."""
        fields = dataclasses.asdict(self)
        fields["recovered"] = list(self.recovered)
        fields["phases"] = [{"phase": name, "seconds": s} for name, s in self.phases]
        fields["worker_stages"] = [{"stage": stage, "seconds": s} for stage, s in self.worker_stages]
        fields["timeline"] = [{"what": what, "worker": worker, "start": start, "end": end}
                              for what, worker, start, end in self.timeline]
        return fields

    @property
    def total_compiled(self) -> int:
        """Kernel compiles this warm-up caused, in this process and its workers."""
        return self.compiled + self.worker_compiled

    def origin(self, variants: int | None = None) -> str:
        """Where the variants came from, in one phrase, e.g. ``"21 compiled by 2 worker processes,
        then loaded from the disk cache"`` (worker compiles reach this process through the disk
        cache, so they are also among ``disk_loads``). ``variants``: how many the warm-up
        produced, to count those that were already in this process."""
        parts = []
        if self.worker_compiled:
            parts.append(f"{self.worker_compiled} compiled by {count(self.workers, 'worker process', 'worker processes')}, "
                         "then loaded from the disk cache")
        if self.compiled:
            parts.append(f"{self.compiled} compiled in this process")
        if self.lock_waits:
            parts.append(f"{self.lock_waits} compiled meanwhile by another process (this warm-up waited for its lock), "
                         "then loaded from the disk cache")
        cached = self.disk_loads - self.worker_compiled - self.lock_waits
        if self.store_entries:
            parts.append(f"{self.store_entries} pulled from the store, then loaded from the disk cache")
            cached -= self.store_entries
        if cached > 0:
            bundle = f", {count(self.bundle_entries, 'entry', 'entries')} installed from a bundle" if self.bundle_entries else ""
            parts.append(f"{cached} loaded from the disk cache, compiled before this warm-up{bundle}")
        if self.restored:
            parts.append(f"{self.restored} restored from the disk cache by zerojit's restore index")
        held = (variants or 0) - self.compiled - max(self.disk_loads, self.worker_compiled) - self.restored
        if parts and held > 0:
            parts.append(f"{held} already in this process")
        if parts:
            return "; ".join(parts)
        return ("nothing compiled or loaded: every variant was already in this process" if variants
                else "nothing compiled or loaded")


@dataclass(frozen=True)
class WarmupReport:
    """What a warm-up did.

    Attributes:
        kernels: per kernel, keys, compiled variants and seconds (summed over its keys).
        failures: every key that failed, with its kernel and error (none hides another).
        seconds: wall-clock seconds of the whole warm-up.
        target: the compile target (``"cuda:90"``, also when taken from an active ``compile_only``
            block) or ``"device"`` when compiled for the GPU present.
        stats: compile, disk-load and worker counts (None for a report not made by ``warmup``).
        skipped: recorded kernels (or specializations) of a ``warmup(manifest=...)`` that could
            not be warmed, each with its reason (:class:`zerojit.manifest.ManifestSkip`).
        generic: the generic variants the warm-up filed (:mod:`zerojit.generic`), one per group
            of keys, each a :class:`~zerojit.kernel.CompiledVariant` marked ``generic``; none of
            them is a key (not in ``kernels``, ``num_keys`` or ``variants``).
        generic_stats: where the generic variants came from, counted apart from ``stats`` (which
            counts the keys); None when the warm-up made none (``generic=False``).
        learned: keys of the learned-keys file (misses after earlier warm-ups,
            :mod:`zerojit.learned`) this warm-up warmed; ``learned_through_keys`` of them as a
            contract kernel's ``CompileKey``, the rest as recorded keys.
        learned_skipped: the file's records not warmed, each naming the line and why
            (:class:`zerojit.learned.LearnedSkip`: another Triton, target or source, corrupted).
        learned_file: the learned-keys file read (None: not read, ``learned=False``).
    """

    kernels: tuple[KernelWarmup, ...]
    failures: tuple[WarmupFailure, ...] = ()
    seconds: float = 0.0
    target: str = "device"
    stats: WarmupStats | None = None
    skipped: tuple[Any, ...] = ()
    generic: tuple[Any, ...] = ()
    generic_stats: WarmupStats | None = None
    learned: int = 0
    learned_through_keys: int = 0
    learned_skipped: tuple[Any, ...] = ()
    learned_file: str | None = None
    manifest: str | None = None  #: the manifest warmed (``warmup(manifest=PATH)``), for messages; None without one
    store: Any = None  #: what ``warmup(store=...)``'s store gave and took (:class:`zerojit.warmup_store.StoreOutcome`)

    @property
    def num_keys(self) -> int:
        return sum(len(k.keys) for k in self.kernels)

    @property
    def generic_variants(self) -> int:
        """How many generic variants the warm-up filed (``len(generic)``)."""
        return len(self.generic)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def variants(self) -> list[Any]:
        """Every compiled variant, kernel by kernel."""
        return [v for k in self.kernels for v in k.variants]

    def keys_by_kernel(self) -> dict[str, tuple[Any, ...]]:
        return {k.kernel: k.keys for k in self.kernels}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (keys as their field dicts)."""
        return {
            "keys": self.num_keys,
            "generic_variants": self.generic_variants,
            "generic_stats": self.generic_stats.to_dict() if self.generic_stats is not None else None,
            "seconds": round(self.seconds, 4),
            "target": self.target,
            "kernels": {
                k.kernel: {"keys": [_key_dict(x) for x in k.keys], "seconds": round(k.seconds, 4),
                           **({"tuning": dataclasses.asdict(k.tuning)} if k.tuning is not None else {}),
                           **({"skipped_configs": list(k.skipped_configs)} if k.skipped_configs else {})}
                for k in self.kernels
            },
            "failures": [{"kernel": f.kernel, "key": _key_dict(f.key), "error": f.error,
                          "stage": f.stage or ("listing" if f.key is None else "key")} for f in self.failures],
            "stats": self.stats.to_dict() if self.stats is not None else None,
            "skipped": [{"kernel": s.kernel, "reason": s.reason} for s in self.skipped],
            "learned": self.learned,
            "learned_through_keys": self.learned_through_keys,
            "learned_skipped": [{"where": s.where, "kernel": s.kernel, "reason": s.reason}
                                for s in self.learned_skipped],
            "learned_file": self.learned_file,
            "store": self.store.to_dict() if self.store is not None else None,
        }

    def summary(self) -> str:
        """A short human-readable table."""
        keys = count(self.num_keys, "key")
        failed_keys = sum(f.key is not None for f in self.failures)
        if failed_keys:  # the failed keys are not among the kernels' keys
            keys = f"{self.num_keys} of {count(self.num_keys + failed_keys, 'key')}"
        modules = dict(self.stats.phases).get("modules") if self.stats is not None else None
        imports = f"{modules:.2f} s of it importing the recorded kernels' modules; " if modules is not None else ""
        if self.generic:
            keys += f" + {count(self.generic_variants, 'generic variant')}"
        kernels = len({k.kernel.removesuffix(LEARNED_SUFFIX) for k in self.kernels})  # (a learned row: its kernel's)
        lines = [f"warm-up: {keys} over {count(kernels, 'kernel')} in "
                 f"{self.seconds:.2f} s ({imports}target {self.target}), {count(len(self.failures), 'failure')}"]
        if self.stats is not None:
            lines.append(f"  {self.stats.origin(len({id(getattr(v, 'compiled', v)) for v in self.variants}))}")
            if self.stats.worker_choice:
                lines.append(f"  compile workers: {self.stats.worker_choice}")
            lines += self.stats.notes("  note: ")
        lines += self.generic_lines("  ")
        if self.store is not None:
            lines += self.store.lines("  ")
        listed = {f.kernel for f in self.failures if f.key is None and not f.stage}  # (a failed key listing says so)
        width = max([40] + [len(k.kernel) for k in self.kernels])  # a long name (a module path) keeps the columns
        for k in self.kernels:
            empty = "  (registered, but get_warmup_keys gave no key: a launch of it will compile)" \
                if not k.keys and k.kernel not in listed else ""
            lines.append(f"  {k.kernel:<{width}} {len(k.keys):>4} {'key ' if len(k.keys) == 1 else 'keys'}  "
                         f"{k.seconds:7.2f} s{empty}")
        if self.stats is not None and self.stats.workers:
            lines.append("  (a kernel's seconds add up its keys' time, its worker processes' included: together "
                         "they can exceed the warm-up's wall time)")
        lines += self.untuned_lines("  ")
        lines += [f"  {k.kernel}: config skipped (cannot run here; Triton's autotuner skips it too): {c}"
                  for k in self.kernels for c in k.skipped_configs]
        lines += self.learned_lines("  ")[:1]
        lines += [f"  FAILED {f}" for f in self.failures]
        lines += [f"  SKIPPED {s}" for s in self.skipped]
        lines += self.learned_lines("  ")[1:]
        return "\n".join(lines)

    def generic_lines(self, indent: str) -> list[str]:
        """The summary's lines on the generic variants (where they came from, notes); none
        without them."""
        lines = [f"{indent}generic variants: {self._generic_origin()}"] if self.generic else []
        if self.generic_stats is not None:
            lines += self.generic_stats.notes(f"{indent}note: ")
        return lines

    def untuned_lines(self, indent: str) -> list[str]:
        """One line per way autotuned kernels serve their untuned tuning keys, summed over the
        kernels served that way and naming them (counted when several), e.g. ``"3 tuning keys
        untuned: first surviving config (2 kernels)"``; none when every tuning key is tuned."""
        ways: dict[str, tuple[int, list[str]]] = {}  # how served -> (tuning keys, kernels)
        for k in self.kernels:
            if k.tuning is not None and k.tuning.untuned:
                n, names = ways.get(k.tuning.served, (0, []))
                ways[k.tuning.served] = (n + k.tuning.untuned, [*names, k.kernel])
        return [f"{indent}{count(n, 'tuning key')} untuned: {served} "
                f"({names[0] if len(names) == 1 else count(len(names), 'kernel')})"
                for served, (n, names) in ways.items()]

    def learned_lines(self, indent: str) -> list[str]:
        """The summary's lines on the learned keys: how many were warmed and how, the file, then
        one ``SKIPPED learned key`` line per record skipped; none when the file gave nothing."""
        if not (self.learned or self.learned_skipped):
            return []
        how = (f" ({self.learned_through_keys} through their kernel's CompileKey, "
               f"{self.learned - self.learned_through_keys} as recorded keys)" if self.learned else "")
        skipped = f", {len(self.learned_skipped)} skipped" if self.learned_skipped else ""
        return ([f"{indent}learned keys: {self.learned} warmed{how}{skipped} ({self.learned_file})"]
                + [f"{indent}SKIPPED learned key {s}" for s in self.learned_skipped])

    def _generic_origin(self) -> str:
        """Where the generic variants came from, e.g. ``"8 compiled in this process; 1 a warmed
        key's variant (already generic)"``."""
        keys = {id(getattr(v, "compiled", v)) for v in self.variants}
        served = sum(id(v.compiled) in keys for v in self.generic)
        origin = self.generic_stats.origin(len(self.generic) - served)
        if not served:
            return origin
        return f"{origin}; {served} a warmed key's variant (already generic)" if len(self.generic) > served \
            else f"{count(served, 'warmed key variant')} (already generic)"

    def __str__(self) -> str:
        return self.summary()


def _key_dict(key: Any) -> Any:
    if key is not None and dataclasses.is_dataclass(key):
        return dataclasses.asdict(key)
    return key if key is None or isinstance(key, (int, float, str, bool)) else repr(key)


_SAME_ERROR_SHOWN = 3  # failures listed per distinct error text; the rest are counted
_ENTRY_NAME = re.compile(r"\b[A-Z2-7]{52}\b")  # a Triton cache entry's folder name (base32 of a SHA-256)


class WarmupError(RuntimeError):
    """Warm-up failed for one or more keys; ``report`` holds every failure and every success. The
    message lists the failures, then the warm-up's notes (``WarmupStats.recovered``: e.g. the
    damaged cache file that made a key compile, which a read-only cache folder then refused)."""

    def __init__(self, report: WarmupReport) -> None:
        keys = sum(f.key is not None for f in report.failures)
        finishes = sum(f.key is None and f.stage == "finish" for f in report.failures)
        listings = len(report.failures) - keys - finishes
        what = [count(keys, "key")] if keys else []
        what += [count(listings, "kernel's key listing", "kernels' key listings")] if listings else []
        what += [count(finishes, "kernel's tuning", "kernels' tuning")] if finishes else []
        lines = [f"zerojit warm-up failed for {' and '.join(what)}:"]
        seen: dict[str, int] = {}  # error text (cache entry names masked) -> failures with it
        for f in report.failures:
            error = _ENTRY_NAME.sub("<entry>", f.error)
            shown = seen.get(error, 0)
            seen[error] = shown + 1
            if shown < _SAME_ERROR_SHOWN:
                lines.append(f"  {f}")
        lines += [f"  ... and {count(n - _SAME_ERROR_SHOWN, 'more failure')} with the same error: {error}"
                  for error, n in seen.items() if n > _SAME_ERROR_SHOWN]
        if report.stats is not None:  # why a key compiled at all (a damaged cache file, named) may explain its failure
            lines += report.stats.notes("  note: ")
        super().__init__("\n".join(lines))
        self.report = report


class NoTargetError(RuntimeError):
    """A warm-up where Triton has no target: no GPU is visible and no compile-only target is active."""
