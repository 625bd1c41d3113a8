"""The coverage audit: warmed keys against what a monitored run actually launched.

Per kernel, from a warm-up report and a :class:`~zerojit.monitor.JitMonitor` that watched the run:

* **warmed**: every warmed zerojit key, with its *hits*: launches through zerojit's launch path,
  and, for a wrapped kernel, through the library's own path (``lib_kernel[grid](...)``: the
  autotuner or heuristics object a zerojit kernel wraps reports its launches after warm-up,
  :meth:`zerojit.kernel.TritonJitKernel.serve_library_path`), so a config the autotuner launched
  is never dead. Triton calls no hook on a hit, so launches no zerojit path sees are not
  counted. Keys that compile to the same Triton variant share that variant's count.
* **dead warm-ups**: warmed, never hit (the "unreachable variant" bug: warm-up and dispatch
  disagree, or the key space is wider than traffic).
* **misses**: runtime compiles (in-process cache misses after warm-up), split into compiled,
  loaded from Triton's disk cache, and blocked (error mode), with the launches of the variant
  compiled at run time, the nearest warmed key and the arguments whose class differs.
* **unwarmed hits**: launches of variants that were neither warmed nor compiled under the monitor
  (compiled before warm-up, or by a warm-up whose report the audit was not given).

Direct ``triton.compile`` calls after warm-up are listed apart, and so are *autotune benchmarks*
after warm-up (an autotuner that met a tuning key with no choice: a runtime event of its own
kind, :class:`AutotuneBenchmark`). The monitor's ``request_path_compiles`` and, in fallback
mode (:mod:`zerojit.serving`), ``fallback_launches``, ``background_compiles`` and ``swaps`` are
reported under those names. Autotune configs a wrapped kernel warmed but its tuning table
did not choose for this traffic are dead keys, and a note says so. A :class:`CoverageAudit` is a
plain frozen value: ``to_dict()``/``from_dict()`` round-trip through JSON, ``table()`` prints.

``zerojit audit -- python script.py ...`` runs a script with ``ZEROJIT_JIT_MONITOR=warn`` and
``ZEROJIT_AUDIT_OUT=<file>``: the child writes its audit there when it exits (``atexit``, so a
script that ends with ``os._exit`` writes nothing), and the command prints it.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import threading
from dataclasses import dataclass
from typing import Any

from . import monitor as _monitor
from . import registry as _registry
from .growth import GrowingParameter
from .outputs import write_output
from .reports import count

__all__ = [
    "AUDIT_OUT_ENV",
    "WarmedKey",
    "RuntimeMiss",
    "UnwarmedHit",
    "AutotuneBenchmark",
    "KernelCoverage",
    "CoverageAudit",
    "build_audit",
    "write_at_exit_if_requested",
]

#: The counts the audit takes from the monitor as they are (JSON names = MonitorCounts' names).
_SERVING_COUNTS = ("request_path_compiles", "fallback_launches", "background_compiles", "swaps")

#: Set by ``zerojit audit``: the file the child process writes its audit JSON to at exit.
AUDIT_OUT_ENV = "ZEROJIT_AUDIT_OUT"


def _key_fields(key: Any) -> dict | None:
    if key is not None and dataclasses.is_dataclass(key) and not isinstance(key, type):
        return {k: v if isinstance(v, (int, float, str, bool, type(None))) else repr(v)
                for k, v in dataclasses.asdict(key).items()}
    return None


@dataclass(frozen=True)
class WarmedKey:
    """One warmed key: ``key`` is the repr of the zerojit ``CompileKey``; ``hits`` its launches."""

    key: str
    hits: int
    fields: dict | None = dataclasses.field(default=None, compare=False, hash=False)
    seconds: float = 0.0  #: what warming it cost (0.0 where the report did not record it)

    @property
    def dead(self) -> bool:
        return self.hits == 0


@dataclass(frozen=True)
class RuntimeMiss:
    """One distinct runtime compile of a kernel.

    Attributes:
        arguments: every argument's runtime class, ``"name: class"`` joined by ``", "``.
        misses: in-process cache misses for it (``compiled + disk_loads + blocked``).
        compiled / disk_loads / blocked: how the misses ended.
        hits: launches of the variant compiled at run time (zerojit launch path).
        nearest_key: repr of the nearest warmed key, or None when nothing of the kernel was warmed.
        differences: ``"block_size: warmed as equal-to-one, called as divisible-by-16"``, ...
        options: launch options passed (text), empty when none.
        no_warmup: set when no zerojit warm-up ran before the run (``"no zerojit warm-up ran
            (--warmup none)"``): then there is no nearest key to name.
        unwarmed: why nothing of the kernel was warmed and what to do (a raw launch no manifest
            warmed: record the program; a zerojit kernel: a dropped registration).
        hints: what to change, one per argument difference (error mode's ``->`` lines).
    """

    arguments: str
    misses: int
    compiled: int
    disk_loads: int
    blocked: int
    hits: int = 0
    nearest_key: str | None = None
    differences: tuple[str, ...] = ()
    options: str = ""
    no_warmup: str | None = None
    unwarmed: str = "no key of this kernel was warmed (registration dropped?)"
    hints: tuple[str, ...] = ()

    @property
    def nearest(self) -> str:
        """Where this miss stands against the warm-up, in words (never "None")."""
        if self.no_warmup:
            return self.no_warmup
        if self.nearest_key is None:
            return self.unwarmed
        return f"nearest warmed key {self.nearest_key}"


@dataclass(frozen=True)
class UnwarmedHit:
    """Launches of a variant that was neither warmed (in the given reports) nor compiled under the monitor."""

    triton_key: str
    hits: int


@dataclass(frozen=True)
class AutotuneBenchmark:
    """An autotuner benchmarking after warm-up (:class:`zerojit.monitor.RuntimeBenchmark`).

    Attributes: kernel (its name), tuning_key (its repr), configs (how many it benchmarks),
    runs (how often: blocked ones included)."""

    kernel: str
    tuning_key: str
    configs: int
    runs: int


@dataclass(frozen=True)
class KernelCoverage:
    """One kernel's coverage: warmed keys with hits, runtime misses, unwarmed hits."""

    kernel: str
    warmed: tuple[WarmedKey, ...] = ()
    misses: tuple[RuntimeMiss, ...] = ()
    unwarmed_hits: tuple[UnwarmedHit, ...] = ()
    hits: int = 0  #: launches of warmed variants (a variant several keys share is counted once)
    #: launches a generic variant served in place of a key the warm-up lacked (fallback mode):
    #: misses that compiled nothing on the request path, learned for the next warm-up
    fallback_launches: int = 0

    @property
    def hit(self) -> tuple[WarmedKey, ...]:
        """Warmed keys launched at least once."""
        return tuple(w for w in self.warmed if w.hits)

    @property
    def dead(self) -> tuple[WarmedKey, ...]:
        """Warmed keys never launched (dead warm-ups)."""
        return tuple(w for w in self.warmed if not w.hits)

    @property
    def runtime_compiles(self) -> int:
        return sum(m.misses for m in self.misses)


@dataclass(frozen=True)
class CoverageAudit:
    """The whole audit: per kernel coverage (warm-up order, then kernels only seen at run time).

    Attributes:
        kernels: per kernel coverage.
        direct: direct ``triton.compile`` calls after warm-up (``RuntimeMiss``, ``arguments``
            prefixed by the compiled function's name).
        mode: the monitor's mode during the run.
        growing: parameters whose runtime values kept growing the key space, with the fix
            (:class:`~zerojit.growth.GrowingParameter`).
        request_path_compiles / fallback_launches / background_compiles / swaps: the monitor's
            counts of those names (:class:`~zerojit.monitor.MonitorCounts`): what a request waited
            for (misses compiled or loaded on the request path, direct compiles), and, in
            fallback mode, the launches generic variants served, the keys compiled in the
            background and the variants swapped in.
    """

    kernels: tuple[KernelCoverage, ...]
    direct: tuple[RuntimeMiss, ...] = ()
    mode: str = "warn"
    benchmarks: tuple[AutotuneBenchmark, ...] = ()  #: autotune benchmarks after warm-up
    growing: tuple[GrowingParameter, ...] = ()
    request_path_compiles: int = 0
    fallback_launches: int = 0
    background_compiles: int = 0
    swaps: int = 0

    @property
    def runtime_compiles(self) -> int:
        """Every compile after warm-up: in-process misses (compiled, disk-loaded or blocked) and direct compiles."""
        return sum(k.runtime_compiles for k in self.kernels) + sum(d.misses for d in self.direct)

    @property
    def ok(self) -> bool:
        """Nothing compiled nor benchmarked (nor tried to) at run time."""
        return self.runtime_compiles == 0 and not self.benchmarks

    @property
    def dead_warmups(self) -> int:
        return sum(len(k.dead) for k in self.kernels)

    @property
    def dead_seconds(self) -> float:
        """What warming the dead keys cost, in seconds."""
        return sum(w.seconds for k in self.kernels for w in k.dead)

    def dead_notes(self) -> list[str]:
        """Footnotes that say what the dead keys mean (none when there are none).

        A dead key that no miss is nearest to: the part of the declared key space this traffic
        did not reach (a longer or different trace may), also beside misses near other keys. A
        miss whose nearest warmed key is dead: for a zerojit kernel, warm-up and dispatch may
        disagree (the runtime launch differs from that key in the arguments its differences
        name); for a kernel warmed from a manifest (a raw ``triton.jit`` function: no dispatch,
        its keys are what the recording launched), this run launched it in classes the
        recording did not.
        """
        def near_dead(k: KernelCoverage) -> bool:
            dead = {w.key for w in k.dead}
            return any(m.nearest_key in dead for m in k.misses)

        def recorded(k: KernelCoverage) -> bool:
            return all(w.key.startswith("RecordedKey(") for w in k.warmed)

        untuned = [k.kernel for k in self.kernels if k.dead and all(w.key.startswith("TunedKey(") for w in k.dead)]
        served = [k.kernel for k in self.kernels if k.dead and not k.misses and k.fallback_launches
                  and k.kernel not in untuned]
        unreached = [k.kernel for k in self.kernels if k.dead and not k.misses and not k.fallback_launches
                     and k.kernel not in untuned]
        beside = [k.kernel for k in self.kernels if k.dead and k.misses and not near_dead(k)]
        suspect = [k.kernel for k in self.kernels if k.dead and near_dead(k) and not recorded(k)]
        unrecorded = [k.kernel for k in self.kernels if k.dead and near_dead(k) and recorded(k)]
        notes = []
        if untuned:
            notes.append(f"dead keys that are autotune configs ({', '.join(untuned)}): compiled at warm-up, not chosen "
                         "by the tuning table or the policy for this traffic")
        if unreached:
            notes.append(f"dead = warmed, never hit by this run ({', '.join(unreached)}): keys of the declared key "
                         "space that this traffic did not reach; no miss, so not a bug")
        if served:
            notes.append(f"dead keys beside misses the fallback served ({', '.join(served)}): this traffic launched "
                         "those kernels in classes the warm-up lacked (each served by a generic variant, compiled in "
                         "the background and learned for the next warm-up); `zerojit learned show` names them")
        if beside:
            notes.append(f"dead keys beside misses nearest to other keys ({', '.join(beside)}): keys of the declared "
                         "key space that this traffic did not reach; each MISS is explained by its own nearest key")
        if suspect:
            notes.append(f"a miss nearest to a dead key ({', '.join(suspect)}): warm-up and dispatch may "
                         "disagree; compare that MISS with its nearest warmed key")
        if unrecorded:
            notes.append(f"a miss nearest to a dead recorded key ({', '.join(unrecorded)}): this run launched the "
                         "kernel in classes its recording did not (a raw kernel has no dispatch: its keys are the "
                         "recorded launches); compare that MISS with its nearest recorded key, and record the program "
                         "again with this workload")
        return notes

    def kernel(self, name: str) -> KernelCoverage:
        """The coverage of kernel ``name``.

        Raises:
            KeyError: no kernel of that name was warmed or seen.
        """
        for k in self.kernels:
            if k.kernel == name:
                return k
        raise KeyError(f"no kernel {name!r} in the audit (kernels: {', '.join(k.kernel for k in self.kernels)})")

    # -- serialization ---------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_dict` gives an equal audit back."""
        def miss(m: RuntimeMiss) -> dict:
            d = dataclasses.asdict(m)
            d["differences"] = list(m.differences)
            d["hints"] = list(m.hints)
            return d

        return {
            "mode": self.mode,
            "runtime_compiles": self.runtime_compiles,
            **{name: getattr(self, name) for name in _SERVING_COUNTS},
            "dead_warmups": self.dead_warmups,
            "dead_warmup_seconds": round(self.dead_seconds, 4),
            "kernels": [
                {
                    "kernel": k.kernel,
                    "hits": k.hits,
                    "warmed": [{"key": w.key, "hits": w.hits, "fields": w.fields, "seconds": w.seconds}
                               for w in k.warmed],
                    "misses": [miss(m) for m in k.misses],
                    "unwarmed_hits": [dataclasses.asdict(u) for u in k.unwarmed_hits],
                    "fallback_launches": k.fallback_launches,
                }
                for k in self.kernels
            ],
            "direct": [miss(d) for d in self.direct],
            "benchmarks": [dataclasses.asdict(b) for b in self.benchmarks],
            "growing": [dataclasses.asdict(g) for g in self.growing],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CoverageAudit":
        def miss(d: dict) -> RuntimeMiss:
            return RuntimeMiss(**{**d, "differences": tuple(d.get("differences", ())), "hints": tuple(d.get("hints", ()))})

        return cls(
            kernels=tuple(
                KernelCoverage(
                    kernel=k["kernel"],
                    warmed=tuple(WarmedKey(w["key"], w["hits"], w.get("fields"), w.get("seconds", 0.0))
                                 for w in k["warmed"]),
                    misses=tuple(miss(m) for m in k["misses"]),
                    unwarmed_hits=tuple(UnwarmedHit(**u) for u in k.get("unwarmed_hits", ())),
                    hits=k.get("hits", 0),
                    fallback_launches=k.get("fallback_launches", 0),
                )
                for k in data["kernels"]
            ),
            direct=tuple(miss(d) for d in data.get("direct", ())),
            mode=data.get("mode", "warn"),
            benchmarks=tuple(AutotuneBenchmark(**b) for b in data.get("benchmarks", ())),
            growing=tuple(GrowingParameter(**g) for g in data.get("growing", ())),
            **{name: data.get(name, 0) for name in _SERVING_COUNTS},
        )

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    # -- text ------------------------------------------------------------------------------------

    def table(self) -> str:
        """A plain-text table (per kernel totals), then the details of hits, dead keys and misses."""
        header = ("kernel", "warmed", "hit", "dead", "hits", "misses", "compiled", "disk", "blocked")
        rows = [
            (k.kernel, len(k.warmed), len(k.hit), len(k.dead), k.hits, k.runtime_compiles,
             sum(m.compiled for m in k.misses), sum(m.disk_loads for m in k.misses), sum(m.blocked for m in k.misses))
            for k in self.kernels
        ]
        width = max([len(header[0])] + [len(r[0]) for r in rows])
        fmt = f"{{:<{width}}}" + "  {:>6}" * (len(header) - 1)
        lines = [f"zerojit coverage audit (monitor: {self.mode})", fmt.format(*header)]
        lines += [fmt.format(*r) for r in rows]
        for k in self.kernels:
            lines.append(f"{k.kernel}:")
            for w in k.warmed:
                cost = f"; {w.seconds:.2f} s of warm-up" if w.dead and w.seconds else ""
                lines.append(f"  {'dead' if w.dead else 'hit ':<4}  {w.key}  ({count(w.hits, 'launch', 'launches')}{cost})")
            for m in k.misses:
                how = f"{m.compiled} compiled, {m.disk_loads} from disk cache, {m.blocked} blocked"
                lines.append(f"  MISS  {m.arguments}  ({count(m.misses, 'miss', 'misses')}: {how}; {count(m.hits, 'launch', 'launches')})")
                lines.append(f"        {m.nearest}")
                if m.nearest_key is not None:
                    for i, d in enumerate(m.differences):
                        lines.append(f"        {d}")
                        if i < len(m.hints):
                            lines.append(f"          -> {m.hints[i]}")
            for u in k.unwarmed_hits:
                lines.append(f"  other {u.triton_key}  ({count(u.hits, 'launch', 'launches')} of a variant neither warmed nor monitored)")
            if k.fallback_launches:
                launches = count(k.fallback_launches, "launch", "launches")
                lines.append(f"  SERVED  {launches} in classes the warm-up lacked, by generic variants (fallback "
                             "mode: no request-path compile)")
        for d in self.direct:
            lines.append(f"direct triton.compile after warm-up: {d.arguments} "
                         f"({d.compiled} compiled, {d.disk_loads} from disk cache)")
        for b in self.benchmarks:
            lines.append(f"autotune benchmark after warm-up: {b.kernel} at tuning key {b.tuning_key} "
                         f"({b.configs} configs, {count(b.runs, 'run', 'runs')})")
        for g in self.growing:
            lines.append(f"growing: kernel {g.kernel!r} parameter {g.parameter!r} took {g.count} distinct values after "
                         f"warm-up: {g.fix}")
        lines += [f"note: {n}" for n in self.dead_notes()]
        if self.mode == "fallback":
            lines.append(f"fallback: {count(self.request_path_compiles, 'request-path compile')}, "
                         f"{count(self.fallback_launches, 'fallback launch', 'fallback launches')}, "
                         f"{count(self.background_compiles, 'background compile')}, {count(self.swaps, 'swap')}")
        if self.ok:
            lines.append(f"zero runtime compiles; {count(self.dead_warmups, 'dead warm-up key')}")
        elif self.runtime_compiles == 0:
            lines.append(f"zero runtime compiles, {count(len(self.benchmarks), 'autotune benchmark')} after warm-up; "
                         f"{count(self.dead_warmups, 'dead warm-up key')}")
        else:
            lines.append(f"{count(self.runtime_compiles, 'runtime compile')} after warm-up; "
                         f"{count(self.dead_warmups, 'dead warm-up key')}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _miss_from(count: Any, hits: int = 0, prefix: str = "") -> RuntimeMiss:
    rec = count.compile
    return RuntimeMiss(
        arguments=prefix + rec.arguments,
        misses=count.misses,
        compiled=count.compiled,
        disk_loads=count.disk_loads,
        blocked=count.blocked,
        hits=hits,
        nearest_key=rec.nearest_key,
        differences=tuple(rec.difference_lines),
        options=rec.options,
        no_warmup=rec.no_warmup,
        **({"unwarmed": rec.unwarmed_reason} if rec.unmigrated else {}),
        hints=tuple(d.hint for d in rec.differences),
    )


def build_audit(report: Any, monitor: Any) -> CoverageAudit:
    """The coverage audit of a monitored run.

    Args:
        report: the :class:`~zerojit.registry.WarmupReport` (or a list of them); None uses the
            reports the monitor was given (warm-ups hand theirs to installed monitors).
        monitor: the :class:`~zerojit.monitor.JitMonitor` that watched the run.
    """
    snap = monitor.snapshot()
    variants: list[Any] = list(snap.variants)
    seen = {id(v.compiled) for v in variants}
    reports = [] if report is None else (list(report) if isinstance(report, (list, tuple)) else [report])
    for r in reports:
        for v in r.variants:
            if v.compiled is not None and id(v.compiled) not in seen:
                seen.add(id(v.compiled))
                variants.append(v)

    key_seconds: dict[int, float] = {}  # id(CompiledKernel) -> seconds its key's warm-up took
    for r in [*monitor.reports, *reports]:
        for k in getattr(r, "kernels", ()):
            for v, sec in zip(k.variants, k.key_seconds):
                key_seconds.setdefault(id(v.compiled), sec)

    variant_hits: dict[int, int] = {}
    miss_hits: dict[tuple[int, str], int] = {}
    unwarmed: dict[str, dict[str, int]] = {}
    served: dict[str, int] = {}  # kernel name -> launches generic variants served in place of a key
    miss_keys = {(id(fn), m.compile.triton_key) for fn, m in zip(snap.miss_fns, snap.misses)}
    for launch in snap.launches:
        ident = id(launch.compiled)
        if ident in seen:
            variant_hits[ident] = variant_hits.get(ident, 0) + launch.count
            continue
        if getattr(launch.compiled, "zerojit_fallback", False):  # a generic variant in place of a key: fallback_launches
            served[launch.kernel.name] = served.get(launch.kernel.name, 0) + launch.count
            continue
        fn = launch.jit_fn if launch.jit_fn is not None else getattr(launch.kernel, "kernel", None)
        fn_key = (id(fn), launch.triton_key or "")  # (a program's function exec launched: its own, as its miss)
        if fn_key in miss_keys:
            miss_hits[fn_key] = miss_hits.get(fn_key, 0) + launch.count
        else:
            per = unwarmed.setdefault(launch.kernel.name, {})
            tk = launch.triton_key or "<not in Triton's in-process cache>"
            per[tk] = per.get(tk, 0) + launch.count

    order: dict[str, dict[str, Any]] = {}

    def entry(name: str) -> dict[str, Any]:
        return order.setdefault(name, {"warmed": [], "misses": [], "variants": set()})

    for v in variants:
        parts = entry(v.kernel)
        parts["warmed"].append(WarmedKey(repr(v.key), variant_hits.get(id(v.compiled), 0), _key_fields(v.key),
                                         key_seconds.get(id(v.compiled), 0.0)))
        parts["variants"].add(id(v.compiled))
    for fn, m in zip(snap.miss_fns, snap.misses):
        hits = miss_hits.get((id(fn), m.compile.triton_key), 0)
        entry(m.compile.kernel)["misses"].append(_miss_from(m, hits))
    for name in [*unwarmed, *served]:
        entry(name)
    kernels = tuple(
        KernelCoverage(
            kernel=name,
            warmed=tuple(parts["warmed"]),
            misses=tuple(parts["misses"]),
            unwarmed_hits=tuple(UnwarmedHit(k, n) for k, n in unwarmed.get(name, {}).items()),
            hits=sum(variant_hits.get(i, 0) for i in parts["variants"]),
            fallback_launches=served.get(name, 0),
        )
        for name, parts in order.items()
    )
    direct = tuple(_miss_from(d, prefix=f"{d.compile.kernel}: ") for d in snap.direct)
    benchmarks = tuple(AutotuneBenchmark(r.kernel, repr(r.tuning_key), r.configs, n) for r, n in snap.benchmarks)
    counts = monitor.counts()
    return CoverageAudit(kernels=kernels, direct=direct, mode=snap.mode, benchmarks=benchmarks, growing=snap.growing,
                         **{name: getattr(counts, name) for name in _SERVING_COUNTS})


_EXIT_LOCK = threading.Lock()
_exit_registered = False


def write_at_exit_if_requested() -> None:
    """When ``ZEROJIT_AUDIT_OUT`` is set, write the process monitor's audit there at exit (once)."""
    global _exit_registered
    if not os.environ.get(AUDIT_OUT_ENV):
        return
    with _EXIT_LOCK:
        if not _exit_registered:
            atexit.register(_write_audit)
            _exit_registered = True


def _write_audit() -> None:
    path = os.environ.get(AUDIT_OUT_ENV)
    mon = _monitor.current()
    if not path or mon is None:
        return
    write_output(path, build_audit(None, mon).to_json())  # whole or not at all


def _on_warmup_complete(report: Any) -> None:
    # A warm-up listener registered after the monitor's (this module imports the monitor first):
    # once the process monitor exists, `zerojit audit`'s child writes its audit at exit.
    if _monitor.current() is not None:
        write_at_exit_if_requested()


_registry.add_warmup_listener(_on_warmup_complete)
