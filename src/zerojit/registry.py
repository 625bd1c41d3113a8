"""The warm-up registry: kernels register where the model is built, warm-up compiles it all.

Model construction and KV-cache binding call ``kernel.register_warmup(**request)`` wherever the
facts that fix a kernel's keys become known (the configuration, the cache's block stride). Those
calls reach the registry activated with :meth:`JitWarmupRegistry.activate` (a ContextVar, so
nested activations and concurrent threads each see their own), and do nothing outside one.
:meth:`JitWarmupRegistry.warmup` then asks each kernel for its keys, compiles every key, loads
modules and launchers, and returns a :class:`WarmupReport`.

Start-up (docs/start-up.md): ``warmup(workers=N)`` compiles in N worker processes and loads here
(:mod:`zerojit.precompile`); ``warmup(bundle=FILE)`` installs a cache bundle first
(:mod:`zerojit.cache`); ``warmup(group=...)`` shards the compiles across ``torch.distributed``
ranks (:mod:`zerojit.distributed`); and processes sharing a cache folder compile each entry once.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import inspect
import operator
import os
import re
import time
from dataclasses import dataclass
from typing import Any, Iterator

__all__ = [
    "JitWarmupRegistry",
    "WarmupReport",
    "KernelWarmup",
    "WarmupFailure",
    "WarmupError",
    "NoTargetError",
    "WarmupStats",
    "register",
    "active_registry",
]

_ACTIVE: contextvars.ContextVar["JitWarmupRegistry | None"] = contextvars.ContextVar("zerojit_registry", default=None)


def active_registry() -> "JitWarmupRegistry | None":
    """The registry activated in this context, or None."""
    return _ACTIVE.get()


def register(kernel: Any, **request: Any) -> None:
    """Register ``kernel`` with ``request`` in the active registry; a no-op when none is active."""
    reg = _ACTIVE.get()
    if reg is not None:
        reg.register(kernel, **request)


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``"1 kernel"``, ``"2 kernels"``, ``"0 processes"`` (``plural`` when not ``noun + "s"``)."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def _freeze(value: Any, where: str) -> Any:
    """A hashable value-identity for a request value: tensors by dtype, shape, strides, alignment."""
    if hasattr(value, "data_ptr") and hasattr(value, "dtype") and hasattr(value, "stride"):
        return ("tensor", str(value.dtype), tuple(value.shape), tuple(value.stride()), value.data_ptr() % 16 == 0)
    if isinstance(value, (bool, int, float)):
        return (type(value).__name__, value)  # 1 == 1.0 == True in Python, three classes to Triton
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v, where) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v, where)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        raise TypeError(f"{where}: a {type(value).__name__} cannot be compared by value; pass a hashable value") from None
    return value


@dataclass(frozen=True)
class WarmupFailure:
    """One key (or a kernel's key listing, ``key=None``) that failed, with the error."""

    kernel: str
    key: Any
    error: str

    def __str__(self) -> str:
        where = "listing its keys" if self.key is None else f"key {self.key}"
        return f"{self.kernel}: {where}: {self.error}"


@dataclass(frozen=True)
class KernelWarmup:
    """One kernel's part of a warm-up: its keys, compiled variants and compile seconds."""

    kernel: str
    keys: tuple[Any, ...]
    variants: tuple[Any, ...]
    seconds: float


@dataclass(frozen=True)
class WarmupStats:
    """Where a warm-up's variants came from (Triton's compile events, counted by zerojit).

    Attributes:
        compiled: variants Triton compiled in this process.
        worker_compiled: variants compiled by this warm-up's worker processes.
        disk_loads: variants this process loaded from Triton's disk cache (compiled earlier, by
            its workers, by another process, or installed from a bundle).
        lock_waits: entries missing when this warm-up looked them up, then found on disk once
            this process (or one of its workers) held the entry's lock: another process compiled
            them meanwhile (this one waited for its lock, or came just after); loaded from disk.
        workers: compile worker processes started (by this warm-up, or for it by
            :meth:`JitWarmupRegistry.start_workers`).
        worker_launchers: CUDA launcher modules built by workers (on a GPU).
        launchers_remembered: CUDA launcher modules missing from the cache folder and copied
            into it from those remembered for this Triton install (built by an earlier
            warm-up's workers; see :func:`zerojit.cache.remembered_launcher`), not built again.
        recovered: what workers could not do (this process did it instead), or did only slowly
            (a kernels' module that imports torch), one line per cause, ending ``[N keys]`` when
            N keys gave the same line.
        bundle_entries: cache entries installed from a bundle.
        restored: variants put straight into the in-process caches from zerojit's restore index
            (a warm start: no Triton lookup; see :mod:`zerojit.restore`).
        phases: wall-clock seconds per phase, in order, as ``(name, seconds)``: ``restore`` (the
            restore index), ``start`` (Triton's build key, hashed once per Triton install; with
            workers booting, also the first launch's one-time costs), ``sweep`` (every other
            key's warm-up launch; with workers, those that miss the disk cache are handed to
            them), ``workers`` (waiting for the workers' results), ``load`` (loading them, as
            they arrive), ``prime`` (the launch path's first launch, on a GPU). Absent phases
            did not run. ``imports`` (after a restore: the launch path's lazy imports, which no
            warm-up launch paid; once per process) comes right after ``restore``.
        worker_seconds: seconds the worker processes spent on their requests (kernel compiles,
            launcher builds, waiting for another process's lock), summed over workers.
        worker_stages: Triton's compile stages (``ir``: the front end's IR; then one per
            lowering stage, e.g. ``ttir``, ``ttgir``, ``llir``, ``ptx``, ``cubin`` (``ptxas``);
            ``store``: writing the cache entry) as ``(stage, seconds)``, summed over the workers'
            compiles (Triton's ``CompileTimes``, given to its compilation listener).
        timeline: what the worker processes did, as ``(what, worker, start, end)`` in seconds since
            the warm-up session began (negative: workers :meth:`JitWarmupRegistry.start_workers`
            started before it), by start. A worker's boot: ``"python"`` (from its start
            to its script's first line), ``"imports"`` (Triton's compiler, zerojit's compile-only
            driver, the kernels' modules), ``"preload"`` (a throwaway compile, only when
            neither Triton's build key nor a launcher request was waiting once its imports
            ended; see ``zerojit._compile_worker.preload``), ``"set-up"`` (the worker's set-up);
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
    restored: int = 0
    phases: tuple[tuple[str, float], ...] = ()
    worker_seconds: float = 0.0
    worker_stages: tuple[tuple[str, float], ...] = ()
    timeline: tuple[tuple[str, int, float, float], ...] = ()

    def notes(self, prefix: str) -> list[str]:
        """``recovered``, one line per cause (a worker's stderr tail indented under it), each
        starting with ``prefix``: for a human-readable report."""
        indent = " " * len(prefix)
        return [prefix + note.replace("\n", "\n" + indent) for note in self.recovered]

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
        if cached > 0:
            bundle = f", {self.bundle_entries} entries installed from a bundle" if self.bundle_entries else ""
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
    """

    kernels: tuple[KernelWarmup, ...]
    failures: tuple[WarmupFailure, ...] = ()
    seconds: float = 0.0
    target: str = "device"
    stats: WarmupStats | None = None

    @property
    def num_keys(self) -> int:
        return sum(len(k.keys) for k in self.kernels)

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
            "seconds": round(self.seconds, 4),
            "target": self.target,
            "kernels": {
                k.kernel: {"keys": [_key_dict(x) for x in k.keys], "seconds": round(k.seconds, 4)} for k in self.kernels
            },
            "failures": [{"kernel": f.kernel, "key": _key_dict(f.key), "error": f.error} for f in self.failures],
            "stats": dataclasses.asdict(self.stats) if self.stats is not None else None,
        }

    def summary(self) -> str:
        """A short human-readable table."""
        keys = count(self.num_keys, "key")
        failed_keys = sum(f.key is not None for f in self.failures)
        if failed_keys:  # the failed keys are not among the kernels' keys
            keys = f"{self.num_keys} of {count(self.num_keys + failed_keys, 'key')}"
        lines = [f"warm-up: {keys} over {count(len(self.kernels), 'kernel')} in "
                 f"{self.seconds:.2f} s (target {self.target}), {count(len(self.failures), 'failure')}"]
        if self.stats is not None:
            lines.append(f"  {self.stats.origin(len({id(getattr(v, 'compiled', v)) for v in self.variants}))}")
            lines += self.stats.notes("  note: ")
        for k in self.kernels:
            lines.append(f"  {k.kernel:<40} {len(k.keys):>4} {'key ' if len(k.keys) == 1 else 'keys'}  {k.seconds:7.2f} s")
        if self.stats is not None and self.stats.workers:
            lines.append("  (a kernel's seconds add up its keys' time, its worker processes' included: together "
                         "they can exceed the warm-up's wall time)")
        lines += [f"  FAILED {f}" for f in self.failures]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def _key_dict(key: Any) -> Any:
    if key is not None and dataclasses.is_dataclass(key):
        return dataclasses.asdict(key)
    return key if key is None or isinstance(key, (int, float, str, bool)) else repr(key)


_SAME_ERROR_SHOWN = 3  # failures listed per distinct error text; the rest are counted
_ENTRY_NAME = re.compile(r"\b[A-Z2-7]{52}\b")  # a Triton cache entry's folder name (base32 of a SHA-256)


class WarmupError(RuntimeError):
    """Warm-up failed for one or more keys; ``report`` holds every failure and every success."""

    def __init__(self, report: WarmupReport) -> None:
        keys = sum(f.key is not None for f in report.failures)
        listings = len(report.failures) - keys
        what = [count(keys, "key")] if keys else []
        what += [count(listings, "kernel's key listing", "kernels' key listings")] if listings else []
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
        super().__init__("\n".join(lines))
        self.report = report


class NoTargetError(RuntimeError):
    """A warm-up where Triton has no target: no GPU is visible and no compile-only target is active."""


def _check_target(target: str, *, compiles: bool, caller: str = "warmup") -> None:
    """Refuse a warm-up that cannot compile, or whose ``target`` argument is not what it compiles for.
    ``compiles``: the registry has Triton kernels (others compile their own way); ``caller``: the
    method the messages name.

    Raises:
        NoTargetError: Triton has no active driver (no GPU, no :func:`zerojit.compile_only.compile_only`).
        ValueError: ``target`` is neither ``"device"`` nor this process's target name.
    """
    from .cache import current_target_name

    current = current_target_name()
    if current is None and not compiles:
        return
    if current is None:
        example = target if _is_target_name(target) else "cuda:90"
        given = (f" ({caller}(target={target!r}) checks the target, it does not select one)" if target != "device"
                 else "")
        raise NoTargetError(
            f"zerojit {'warm-up' if caller == 'warmup' else caller}: no GPU is visible and no compile-only target is "
            f"active, so Triton cannot compile{given}. On a machine without a GPU, warm up inside "
            f"`with zerojit.compile_only.compile_only(\"{example}\"):` (real cubins for that target, nothing loaded).")
    if target != "device" and target != current:
        from .compile_only import active_compile_only

        how = "compile-only" if active_compile_only() is not None else "its GPU"
        inside = f", or warm up inside compile_only({target!r})" if _is_target_name(target) else ""
        raise ValueError(
            f"{caller}(target={target!r}): this process compiles for {current!r} ({how}); target names what the "
            f"report records and what a bundle must be built for, so it must match: pass target=\"device\" or "
            f"{current!r}{inside}")


def _is_target_name(target: Any) -> bool:
    """True when ``target`` is a compile-only target name (``"cuda:90"``), which a message may
    suggest to ``compile_only``; ``"device"`` and anything else are not."""
    from .compile_only import parse_target

    try:
        parse_target(target)
    except (ValueError, TypeError, AttributeError):
        return False
    return True


def _cache_hint(error: BaseException) -> str:
    """What to do when a compile failed writing into Triton's cache folder (read-only: an unusable
    folder was refused before any key, :func:`zerojit.cache.check_cache_folder`), else ''."""
    from .cache import cache_dir

    folder = os.path.abspath(cache_dir())
    filename = getattr(error, "filename", None)
    if not (isinstance(error, OSError) and isinstance(filename, str) and os.path.abspath(filename).startswith(folder)):
        return ""
    return f" (Triton's cache folder {cache_dir()!r} cannot be used: point TRITON_CACHE_DIR at a writable folder)"


def _warm_target() -> tuple[Any, bool]:
    """(Triton's current target, whether it is the compile-only driver's), or (None, True) when no
    driver can start (no GPU and no compile-only target: nothing will compile anyway)."""
    from triton.runtime.driver import driver

    from .compile_only import CompileOnlyDriver

    try:
        active = driver.active
        return active.get_current_target(), isinstance(active, CompileOnlyDriver)
    except Exception:
        return None, True


def _primer_jobs(jobs: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """The primer kernel's warm-up job when this warm-up will load Triton kernels on a GPU and then
    prime the launch path (:func:`zerojit.loading.prime_launch_path`); otherwise none."""
    from .compile_only import active_compile_only
    from .kernel import TritonJitKernel

    if active_compile_only() is not None or not any(isinstance(k, TritonJitKernel) for k, _ in jobs):
        return []
    try:
        import torch

        if not torch.cuda.is_available():
            return []
        from ._primer import primer
        from .loading import _primed

        if torch.cuda.current_device() in _primed:
            return []
        return [(primer, type(primer).CompileKey())]
    except Exception:  # priming is an optimisation; prime_launch_path compiles it otherwise
        return []


class JitWarmupRegistry:
    """Collects warm-up requests and compiles their whole key space.

    Kernels are grouped by class (every instance of a kernel class shares its Triton function);
    requests are compared by value, so a 61-layer model registering the same request 61 times
    keeps one.
    """

    def __init__(self) -> None:
        self._kernels: dict[type, Any] = {}
        self._requests: dict[type, dict[Any, dict[str, Any]]] = {}
        self._prestarted: Any = None  # start_workers' pool, for the next warmup()

    @contextlib.contextmanager
    def activate(self) -> Iterator["JitWarmupRegistry"]:
        """Make this the registry that ``register_warmup`` calls reach, inside the block."""
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)

    def register(self, kernel: Any, **request: Any) -> None:
        """Record that ``kernel`` must be warmed for ``request`` (kept once per distinct value).

        Raises:
            TypeError: a request value that cannot be compared by value (names kernel and input).
        """
        group = type(kernel)
        self._kernels.setdefault(group, kernel)
        frozen = tuple(sorted((k, _freeze(v, f"{kernel.name}: request input {k!r}")) for k, v in request.items()))
        self._requests.setdefault(group, {}).setdefault(frozen, dict(request))

    @property
    def kernels(self) -> list[Any]:
        """The registered kernels, in registration order."""
        return list(self._kernels.values())

    def requests(self, kernel: Any) -> list[dict[str, Any]]:
        """The distinct requests registered for ``kernel``'s class."""
        return list(self._requests.get(type(kernel), {}).values())

    def warmup_keys(self, config: Any = None) -> tuple[dict[Any, list[Any]], list[WarmupFailure]]:
        """Every kernel's merged, deduplicated keys (first-seen order), and listing failures.

        ``config`` goes only to ``get_warmup_keys`` methods that declare a ``config`` parameter.
        """
        plan: dict[Any, list[Any]] = {}
        failures: list[WarmupFailure] = []
        for group, kernel in self._kernels.items():
            param = inspect.signature(kernel.get_warmup_keys).parameters.get("config")
            takes_config = param is not None
            keys: dict[Any, None] = {}
            if takes_config and config is None and param.default is inspect.Parameter.empty:
                failures.append(WarmupFailure(kernel.name, None, "its get_warmup_keys needs the model configuration: "
                                              "pass it as warmup(config=...)"))
                plan[kernel] = []
                continue
            for request in self._requests[group].values():
                try:
                    found = kernel.get_warmup_keys(config=config, **request) if takes_config else kernel.get_warmup_keys(**request)
                except Exception as e:
                    failures.append(WarmupFailure(kernel.name, None, f"{type(e).__name__}: {e}"))
                    continue
                for key in found:
                    keys.setdefault(key, None)
            plan[kernel] = list(keys)
        return plan, failures

    def start_workers(self, config: Any = None, *, workers: int, target: str = "device") -> int:
        """Start the compile worker processes of the next :meth:`warmup` now, so that their boot
        overlaps what the engine does before its warm-up (loading weights, building the KV cache).

        A worker's boot (Python, Triton's import, the kernels' modules; ~0.4 s on the H200 host
        with 16 booting at once) otherwise opens every cold warm-up; so does hashing Triton's
        build on a new Triton install, which this also starts (on a thread). Call it once the key
        space is complete (after binding the KV cache): whether the warm-up will be cold is
        judged on it. The next :meth:`warmup` with ``workers > 1`` uses these workers when they
        compile for its target into its cache folder and its key space is cold there, growing or
        shrinking them to its own ``workers``; otherwise it stops them, says why in
        ``stats.recovered`` and leaves them out of ``stats.workers``. Calling this again stops
        the workers it started before; :meth:`stop_workers` stops them; at the latest they stop
        when this process exits (not when the registry is dropped).

        Args:
            config: the model configuration, as for :meth:`warmup` (the key space to serve).
            workers: worker processes to start, at most one per key (1: none, the warm-up will
                compile in-process).
            target: as for :meth:`warmup`: ``"device"`` or this process's target name.

        Returns:
            The number of worker processes being started (each on its own thread: they may not
            exist yet when this returns): 0 when none is needed (``workers=1``, no Triton kernel
            a worker can import, a cache folder this process cannot write (workers could write
            no entry), or this key space was warmed into this cache folder before: its marker or
            restore index is there).

        Raises:
            ValueError: ``workers`` is not a whole number >= 1, or ``target`` names another
                target than the one this process compiles for.
            NoTargetError: there is no GPU and no compile-only target.
            zerojit.cache.CacheFolderError: Triton's cache folder cannot be used.
        """
        from .cache import check_cache_folder
        from .kernel import TritonJitKernel
        from .precompile import start_worker_pool

        try:
            n = operator.index(workers) if not isinstance(workers, bool) else 0
        except TypeError:
            n = 0
        if n < 1:
            raise ValueError(f"start_workers(workers={workers!r}): the number of compile worker processes to start "
                             "is a whole number >= 1")
        self.stop_workers()
        plan, _ = self.warmup_keys(config)
        jobs = [(kernel, key) for kernel, keys in plan.items() for key in keys]
        compiles = any(isinstance(k, TritonJitKernel) for k in [*self._kernels.values(), *plan])
        _check_target(target, compiles=compiles, caller="start_workers")
        if not compiles:
            return 0
        check_cache_folder("zerojit start_workers")
        self._prestarted = start_worker_pool(jobs, n)
        return len(self._prestarted.threads) if self._prestarted is not None else 0

    def stop_workers(self) -> None:
        """Stop the workers :meth:`start_workers` started, if no warm-up took them (else nothing)."""
        pool, self._prestarted = self._prestarted, None
        if pool is not None:
            pool.finish()

    def warmup(
        self,
        config: Any = None,
        *,
        workers: int | None = None,
        progress: bool = True,
        raise_on_failure: bool = True,
        target: str = "device",
        bundle: str | os.PathLike | None = None,
        group: Any = None,
    ) -> WarmupReport:
        """Compile (and on a GPU load) every key of every registered kernel.

        Args:
            config: the model configuration, passed to ``get_warmup_keys(config=...)`` where declared.
            workers: compile worker processes (default 1: compile in-process, key after key).
                Workers compile into Triton's disk cache; this process then loads every key the
                way a serial warm-up does, so the report is the same (see :mod:`zerojit.precompile`).
                Workers :meth:`start_workers` started are used when they suit (``workers > 1``).
            progress: show a tqdm progress bar.
            raise_on_failure: raise :class:`WarmupError` after trying every key if any failed.
            target: recorded in the report (the caller's compile target); also the target a
                ``bundle`` must be for (``"device"``: the GPU's or the compile-only target).
            bundle: a cache bundle (``zerojit bundle export``) to install first; its keys then
                load with zero compiles (:func:`zerojit.cache.import_bundle`).
            group: a ``torch.distributed`` process group: the keys are sharded across its ranks,
                each compiles its share, then every rank loads all (:mod:`zerojit.distributed`).

        Whatever ``workers``, ``bundle`` or ``group``, every compile of an entry missing from the
        disk cache holds that entry's file lock, so processes sharing a cache folder compile each
        entry once.

        Raises:
            ValueError: ``workers`` is not a whole number >= 1 (or None).
            WarmupError: some key failed (only after every key was tried); ``.report`` has all.
            zerojit.cache.BundleError: the bundle is for another Triton build, Python or target,
                or is truncated or corrupted (nothing installed, nothing warmed).
            NoTargetError: there is no GPU and no compile-only target: nothing can compile.
            zerojit.cache.CacheFolderError: Triton's cache folder is empty, a file, or cannot be
                created (a bundle's: also not writable).
            TypeError: ``bundle`` is not a path.
            ValueError: ``target`` names another target than the one this process compiles for.
        """
        from .cache import check_cache_folder
        from .kernel import TritonJitKernel
        from .precompile import JobOutcome, WarmupSession, plan_digest
        from .restore import restore_variants, save_index

        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
            raise ValueError(f"warmup(workers={workers!r}): the number of compile worker processes is a whole number "
                             ">= 1 (or None: compile in this process)")
        start = time.perf_counter()
        compiles = any(isinstance(k, TritonJitKernel) for k in self._kernels.values())
        _check_target(target, compiles=compiles)
        imported = None
        if bundle is not None:
            from .cache import import_bundle

            imported = import_bundle(bundle, target=None if target == "device" else target)
        if compiles:
            check_cache_folder("zerojit warm-up")
        plan, failures = self.warmup_keys(config)
        jobs = [(kernel, key) for kernel, keys in plan.items() for key in keys]
        extra = _primer_jobs(jobs)  # on a GPU: the launch-path primer, compiled with the rest
        # Warm start: what zerojit's restore index covers skips Triton's lookup (zerojit.restore).
        # Not with a process group: every rank must run the same jobs through the sharding.
        restore_target, dry = _warm_target()
        digest = plan_digest(jobs)
        restored: dict = {}
        t0 = time.perf_counter()
        if group is None and restore_target is not None:
            restored = restore_variants(jobs, digest, restore_target, load=not dry)
            if extra and restore_variants(extra, plan_digest(extra), restore_target, load=not dry):
                extra = []  # the primer has an index of its own: it is not part of every warm-up
        restore_seconds = time.perf_counter() - t0
        imports_seconds = None
        if restored:  # no warm-up launch ran: pay the launch path's lazy imports here, once per process
            from .loading import import_launch_path_modules

            t0 = time.perf_counter()
            import_launch_path_modules()
            imports_seconds = time.perf_counter() - t0
        rest = [job for i, job in enumerate(jobs) if i not in restored] + extra

        prestarted, self._prestarted = self._prestarted, None  # start_workers': used or stopped by the session
        with WarmupSession(workers=workers, pool=prestarted) as session:
            if group is not None:
                from .distributed import sharded_warmup

                ran = sharded_warmup(session, rest, group, progress=progress)
            elif rest:
                ran = session.run(rest, progress=progress, expect_warm=imported is not None or bool(restored))
            else:
                ran = []
        ran_iter = iter(ran)
        outcomes = [JobOutcome(*restored[i], None) if i in restored else next(ran_iter) for i in range(len(jobs))]
        if restore_target is not None:
            if len(restored) < len(jobs):
                save_index(jobs, [o.variant if o.error is None else None for o in outcomes], digest, restore_target)
            if extra:
                primer = list(ran_iter)
                save_index(extra, [o.variant if o.error is None else None for o in primer], plan_digest(extra),
                           restore_target)

        per_kernel: dict[Any, list] = {kernel: [] for kernel in plan}
        for (kernel, key), outcome in zip(jobs, outcomes):
            if outcome.error is not None:
                error = outcome.error
                failures.append(WarmupFailure(kernel.name, key, f"{type(error).__name__}: {error}{_cache_hint(error)}"))
            else:
                per_kernel[kernel].append((key, outcome.variant, outcome.seconds))
        kernels = tuple(
            KernelWarmup(
                kernel=kernel.name,
                keys=tuple(k for k, _, _ in done),
                variants=tuple(v for _, v, _ in done),
                seconds=sum(s for _, _, s in done),
            )
            for kernel, done in per_kernel.items()
        )
        phases = {"restore": restore_seconds, **({"imports": imports_seconds} if imports_seconds is not None else {}),
                  **session.counts.phases}
        if any(getattr(v, "loaded", False) for k in kernels for v in k.variants):
            from .loading import prime_launch_path

            t0 = time.perf_counter()
            prime_launch_path()
            phases["prime"] = time.perf_counter() - t0
        stats = session.counts.stats(bundle_entries=len(imported.installed) if imported else 0, restored=len(restored) + session.counts.restored,
                                     phases=phases)
        if target == "device":  # name what was really compiled for
            from .compile_only import active_compile_only

            compile_only_driver = active_compile_only()
            target = compile_only_driver.target_name if compile_only_driver is not None else target
        report = WarmupReport(kernels=kernels, failures=tuple(failures), seconds=time.perf_counter() - start,
                              target=target, stats=stats)

        # Runtime JIT monitor: from here on a compile is a runtime compile. Installs the process
        # monitor when ZEROJIT_JIT_MONITOR / monitor.configure() asks for warn or error, and gives
        # this report to every installed monitor (see zerojit.monitor.on_warmup_complete).
        from . import monitor as _monitor

        _monitor.on_warmup_complete(report)

        if failures and raise_on_failure:
            raise WarmupError(report)
        return report
