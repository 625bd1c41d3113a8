"""``zerojit run``: replay a real request trace through the sparse-MLA kernels with zero runtime JIT.

The pipeline, as :func:`run` reads::

    config   = load_config(...)                        # 1. a shipped config or a JSON file
    model    = SparseMLAModel(config, backend)          # 2. layers register K3/K4/K5/K7
    cache    = allocate_kv_cache(config, ...)           # 3. packed across layers: real strides
    model.bind_kv_cache(cache)                          #    layers register K1/K2/K6
    warmup   = warm_up(registry, config, options)       # 4. compile (and on a GPU load) every key
    monitor  = JitMonitor(mode).install()               # 5. from here on a compile is a runtime compile
    replay   = replay_trace(trace, plan, options,       # 6. set-up, start-up's heap frozen, the primer
                            prime=primer_steps)         #    last, then continuous batching
    report   = RunReport(...)                           # 7. counts, step times, the coverage audit

Devices:

* ``cpu`` (the default without a GPU): 2-4 run under :func:`zerojit.compile_only.compile_only`
  (default target ``cuda:90``), so warm-up compiles real cubins and every launch is a *dry
  launch*: Triton's binder on real CPU tensors and a cache lookup, which checks the zero-JIT
  property exactly and executes nothing. Dry steps allocate their inputs with ``torch.empty``
  (only dtypes, shapes, strides and alignment matter). ``check=N`` then replays the same seeded
  schedule in a child process with ``TRITON_INTERPRET=1`` (Triton decides at decoration time
  whether a kernel is interpreted) that fills N sampled steps with values, interprets the kernels
  and compares them with the PyTorch references; the child neither warms up nor compiles.
* ``cuda``: real launches on every step (every value filled, top-k drawn on the GPU);
  ``check=N`` compares N sampled steps with the references in process.

Warm-up modes (``RunOptions.warmup``), to compare what each puts on the request path:

* ``zerojit``: :meth:`JitWarmupRegistry.warmup` (compile, load module, build launcher);
* ``triton``: Triton's own ``JITFunction.warmup`` per warmed key (compile only, no module load
  and no launcher: the first launch of each variant still pays those on a GPU);
* ``none``: plain Triton JIT (every variant compiles at its first launch).

``triton`` and ``none`` run the monitor in ``warn`` mode (their compiles are the point), in a
fresh, empty Triton cache directory, and refuse to run in a process whose kernels already hold
compiled variants (their counts would be too low): run each in a fresh process.

Monitor modes: a zerojit warm-up serves in ``fallback`` mode on a GPU (a miss a generic variant
serves launches it at once and compiles the specialized key in the background,
:mod:`zerojit.serving`) and in ``error`` mode under compile-only (CI and tests: a miss fails the
run). In fallback mode the runner calls :func:`zerojit.serving.between_requests` after every
step, outside its timing, so a swap never lands inside a step (every launch of one step uses the
same variant), and at the end waits up to :data:`BACKGROUND_WAIT_S` for the background compiles
it started, applies the swaps that are ready (after the last step: between requests), then
reports what happened (``background_idle`` says whether they all ended).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch

from zerojit import triton_compat
from zerojit.audit import CoverageAudit, build_audit
from zerojit.kernel import _WARMUP_SINK, CompiledVariant
from zerojit.kernels.mla.config import ModelConfig
from zerojit.monitor import ENV_VAR as JIT_MONITOR_ENV, FALLBACK_MISSES, MODES as JIT_MONITOR_MODES, SWAP_POLICIES, JitMonitor
from zerojit.registry import (JitWarmupRegistry, KernelWarmup, WarmupFailure, WorkerChoice, WarmupReport, capped_workers,
                              count, usable_cores)

from .config import load_config
from .graphs import DecodeGraphs, GraphReport, live_rows
from .kv_blocks import BlockAllocator
from .kv_cache import PagedKVCache, allocate_kv_cache
from .metadata import (
    KERNELS,
    REFERENCES,
    DecodeBuffers,
    MetadataPlan,
    build_step_inputs,
    compare_metadata,
    step_metadata,
)
from .model import SparseMLAModel
from .scheduler import Batch, Scheduler, SchedulerLimits
from .trace import DEFAULT_TRACE, Trace, load_trace

__all__ = [
    "WARMUP_MODES",
    "RunError",
    "RunOptions",
    "usable_cores",
    "option_conflicts",
    "KVCacheSummary",
    "WarmupSummary",
    "RequestPathCost",
    "CheckReport",
    "RunReport",
    "run",
    "warm_up",
    "cut_keyspace",
    "replay_trace",
    "choose_check_steps",
]

#: ``RunOptions.warmup`` values.
WARMUP_MODES = ("zerojit", "triton", "none")
#: Seconds a fallback-mode run waits, after its last step, for the background compiles it started
#: (their counts then are in the report; a compile still running after it is reported as such).
BACKGROUND_WAIT_S = 120.0


class RunError(RuntimeError):
    """The run cannot start or go on as asked; the message says what to change."""


# ---------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunOptions:
    """What ``zerojit run`` does (one field per CLI option).

    Attributes:
        config: a shipped config name (``deepseek-v3.2``, ``dsv4-like``) or a JSON file path.
        trace: an Azure-format trace CSV; None: the shipped 2,000-request slice.
        requests: replay only the first N requests (None: all).
        device: ``"cpu"`` or ``"cuda"``; None: cuda when available.
        target: the compile-only target on cpu (``cuda:90`` = sm_90).
        warmup: ``zerojit`` | ``triton`` | ``none`` (see the module docstring).
        jit_monitor_mode: ``fallback`` (a miss a generic variant serves launches it, the key
            compiles in the background), ``error`` (raise before any runtime compile), ``warn``
            or ``off``; None: after a zerojit warm-up ``fallback`` on a GPU and ``error`` under
            compile-only (cpu), ``warn`` after the ``triton`` / ``none`` ones, which accept only
            ``warn`` (their runtime compiles are what they measure).
        check: steps to check against the references (None: 0 on cpu, 8 on cuda).
        check_max_tokens: on cpu, only steps of at most this many tokens are sampled (the
            interpreter runs one program at a time).
        dcp_size, dcp_rank, num_speculative_tokens: override the config's (None: keep).
        backend: attention backend name (None: the config's default).
        seed: seeds the top-k draws and the check sampling.
        progress: show progress bars on stderr where it is a terminal (tqdm's ``disable=None``).
        kv_cache_tokens: context tokens the paged KV cache holds (over all DCP ranks).
        step_interval_s: simulated seconds per scheduler step (arrivals replayed in that time).
        workers: zerojit warm-up compile worker processes (1: compile in this process; None:
            chosen by :func:`zerojit.registry.choose_workers` from the usable cores and the keys
            to compile, none when the cache is warm; the report says the choice); more than
            :func:`usable_cores` are capped to it (:attr:`warmup_workers`). The ``triton`` /
            ``none`` warm-ups take none (``workers > 1`` is refused).
        fresh_triton_cache: compile into a new, empty Triton cache directory (always for the
            ``triton`` / ``none`` warm-ups).
        generic: the warm-up also compiles the generic variants (``registry.warmup(generic=)``).
        swap, fallback_miss, background_workers: fallback mode's
            ``zerojit.monitor.FallbackOptions`` (``swap``, ``fallback_miss``, ``workers``).
        cut_keyspace: benchmarks only: after the primer, each kernel's first specialized warmed
            variant is dropped from Triton's in-process cache (:func:`cut_keyspace`), so the
            trace misses there; needs a zerojit warm-up.
        learn_cut: benchmarks only (no CLI flag): the cut's misses are learned (appended to the
            learned-keys file) as a real miss's would be; off by default, since they are keys of
            the declared space. ``benchmarks/tensor_parallel.py`` turns it on to count the records
            a tensor-parallel group sharing one cache folder makes of one rank's miss.
        learned: a zerojit warm-up also warms the keys earlier runs missed into this cache folder
            (:mod:`zerojit.learned`; ``--no-learned``: False).
        store: a fleet store (``--store``): its URL or an opened one; the zerojit warm-up pulls
            the entries it needs that the cache lacks, and pushes when it was opened to.
        cuda_graphs: capture decode steps as CUDA graphs per ``config.cuda_graph_batch_sizes``
            bucket and replay them (:mod:`zerojit.runner.graphs`); needs a CUDA GPU. The first
            ``check`` graph steps are compared with the eager launch of the same inputs.
    """

    config: str = "dsv4-like"
    trace: str | None = None
    requests: int | None = None
    device: str | None = None
    target: str = "cuda:90"
    warmup: str = "zerojit"
    jit_monitor_mode: str | None = None
    check: int | None = None
    check_max_tokens: int = 512
    dcp_size: int | None = None
    dcp_rank: int | None = None
    num_speculative_tokens: int | None = None
    backend: str | None = None
    seed: int = 0
    progress: bool = True
    kv_cache_tokens: int = 1 << 20
    step_interval_s: float | None = 0.05
    workers: int | None = None
    fresh_triton_cache: bool = False
    generic: bool = True
    swap: str = "between-requests"
    fallback_miss: str = "compile"
    background_workers: int = 1
    cut_keyspace: bool = False
    learn_cut: bool = False
    learned: bool = True
    store: Any = None
    cuda_graphs: bool = False

    def __post_init__(self) -> None:
        problems = []
        if self.warmup not in WARMUP_MODES:
            problems.append(f"warmup={self.warmup!r}: must be one of {', '.join(WARMUP_MODES)}")
        if self.jit_monitor_mode is not None and self.jit_monitor_mode not in JIT_MONITOR_MODES:
            problems.append(f"jit_monitor_mode={self.jit_monitor_mode!r}: must be one of {', '.join(JIT_MONITOR_MODES)}")
        if self.workers is not None and (isinstance(self.workers, bool) or not isinstance(self.workers, int)
                                         or self.workers < 1):
            problems.append(f"workers={self.workers!r}: must be an int >= 1 (or None: chosen from the cores and the keys)")
        problems += [f"{a}={getattr(self, a)!r} and {b}={getattr(self, b)!r} conflict: {why}"
                     for a, b, why in option_conflicts(self.warmup, self.jit_monitor_mode, self.workers,
                                                       cut_keyspace=self.cut_keyspace)]
        if self.learn_cut and not self.cut_keyspace:
            problems.append("learn_cut=True needs cut_keyspace=True (it learns the cut's misses)")
        if self.swap not in SWAP_POLICIES:
            problems.append(f"swap={self.swap!r}: must be one of {', '.join(SWAP_POLICIES)}")
        if self.fallback_miss not in FALLBACK_MISSES:
            problems.append(f"fallback_miss={self.fallback_miss!r}: must be one of {', '.join(FALLBACK_MISSES)}")
        if (isinstance(self.background_workers, bool) or not isinstance(self.background_workers, int)
                or self.background_workers < 1):
            problems.append(f"background_workers={self.background_workers!r}: must be an int >= 1")
        if self.device not in (None, "cpu", "cuda"):
            problems.append(f"device={self.device!r}: must be cpu or cuda")
        if self.requests is not None and self.requests < 1:
            problems.append(f"requests={self.requests}: must be >= 1")
        if self.check is not None and self.check < 0:
            problems.append(f"check={self.check}: must be >= 0")
        if self.kv_cache_tokens < 1:
            problems.append(f"kv_cache_tokens={self.kv_cache_tokens}: must be >= 1")
        try:
            from zerojit.compile_only import parse_target

            parse_target(self.target)  # a bad target is refused here, before any work
        except ValueError as e:
            problems.append(str(e))
        if len(problems) == 1:
            raise RunError(f"invalid run options: {problems[0]}")
        if problems:
            raise RunError("invalid run options:\n" + "\n".join(f"  - {p}" for p in problems))

    @property
    def config_overrides(self) -> dict[str, int]:
        """The config fields this run overrides."""
        fields = dict(dcp_size=self.dcp_size, dcp_rank=self.dcp_rank, num_speculative_tokens=self.num_speculative_tokens)
        return {k: v for k, v in fields.items() if v is not None}

    @property
    def trace_path(self) -> Path:
        return Path(self.trace) if self.trace else DEFAULT_TRACE

    def resolved_device(self) -> torch.device:
        """The run's device (cuda when available unless told).

        Raises:
            RunError: ``cuda`` asked for without a GPU; ``cuda_graphs`` on a cpu run.
        """
        if self.device == "cuda" and not torch.cuda.is_available():
            raise RunError("--device cuda: no CUDA GPU is available; use --device cpu (compile-only dry launches)")
        device = torch.device(self.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if self.cuda_graphs and device.type != "cuda":
            raise RunError("--cuda-graphs needs a CUDA GPU: CUDA-graph capture and replay run on one (this run is on "
                           "cpu: compile-only dry launches, nothing to capture)")
        return device

    def checks_for(self, device: torch.device) -> int:
        return self.check if self.check is not None else (8 if device.type == "cuda" else 0)

    @property
    def monitor_mode(self) -> str:
        """The monitor's mode for this run: ``jit_monitor_mode``, else after a zerojit warm-up
        ``fallback`` on a GPU and ``error`` under compile-only (what CI and tests use: a miss
        fails), and ``warn`` after the triton / none ones.

        Raises:
            RunError: ``device="cuda"`` without a GPU (:meth:`resolved_device`).
        """
        if self.jit_monitor_mode is not None:
            return self.jit_monitor_mode
        if self.warmup != "zerojit":
            return "warn"
        return "fallback" if self.resolved_device().type == "cuda" else "error"

    def fallback_options(self) -> Any:
        """This run's ``zerojit.monitor.FallbackOptions`` (fallback mode)."""
        from zerojit.monitor import FallbackOptions

        return FallbackOptions(swap=self.swap, fallback_miss=self.fallback_miss, workers=self.background_workers)

    @property
    def warmup_workers(self) -> "int | WorkerChoice | None":
        """The compile workers the warm-up may start: ``workers``, capped to :func:`usable_cores`
        (:func:`zerojit.registry.capped_workers`: a :class:`~zerojit.registry.WorkerChoice` whose
        words say so); None: the warm-up chooses."""
        return capped_workers(self.workers, usable_cores())


def option_conflicts(warmup: str, jit_monitor_mode: str | None, workers: int | None, *,
                     cut_keyspace: bool = False) -> list[tuple[str, str, str]]:
    """The :class:`RunOptions` fields given together that cannot go together, as ``(field,
    field, why and what to change)``; empty when none. The CLI names the flags of the same
    fields (``--warmup`` ...), :class:`RunOptions` the fields.

    - ``warmup`` ``triton`` / ``none`` with ``jit_monitor_mode`` other than ``warn``: their runtime
      compiles are what they measure, so the monitor must let them happen and count them.
    - ``warmup`` ``triton`` / ``none`` with ``workers > 1``: only a zerojit warm-up has compile
      workers (Triton's ``warmup()`` compiles in this process; ``none`` compiles nothing).
    - ``warmup`` ``triton`` / ``none`` with ``cut_keyspace``: the cut drops what a zerojit
      warm-up loaded (a fallback mode, ``jit_monitor_mode`` ``fallback``, is refused by the first
      rule: it serves misses from a zerojit warm-up's generic variants).
    """
    if warmup == "zerojit" or warmup not in WARMUP_MODES:
        return []
    out = []
    if jit_monitor_mode not in (None, "warn"):
        out.append(("warmup", "jit_monitor_mode",
                    "a triton or none warm-up runs the monitor in warn mode (its runtime compiles are what it "
                    "measures); leave the monitor mode out or make it warn"))
    if workers is not None and workers > 1:
        out.append(("warmup", "workers",
                    "only a zerojit warm-up has compile workers (a triton warm-up compiles in this process, none "
                    "compiles nothing before the replay); leave the workers out or warm up with zerojit"))
    if cut_keyspace:
        out.append(("warmup", "cut_keyspace",
                    "the cut drops variants a zerojit warm-up loaded; warm up with zerojit"))
    return out


# ---------------------------------------------------------------------------------------------
# Report values
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WarmupSummary:
    """What the warm-up did: its mode, keys, seconds, target, failures; ``report`` for the audit."""

    mode: str
    keys: int
    seconds: float
    target: str
    keys_by_kernel: dict[str, int]
    failures: tuple[str, ...] = ()
    report: WarmupReport | None = field(default=None, compare=False, repr=False)

    @property
    def origin(self) -> str | None:
        """Where zerojit's variants came from (compiled, loaded, restored), or None for other modes."""
        if self.report is None or self.report.stats is None:
            return None
        return self.report.stats.origin(len({id(getattr(v, "compiled", v)) for v in self.report.variants}))

    @property
    def worker_choice(self) -> str | None:
        """The compile workers zerojit's warm-up allowed and why, or None for other modes."""
        if self.report is None or self.report.stats is None:
            return None
        return self.report.stats.worker_choice or None

    def to_dict(self) -> dict[str, Any]:
        stats = self.report.to_dict()["stats"] if self.report is not None else None
        return {"mode": self.mode, "keys": self.keys, "seconds": round(self.seconds, 3), "target": self.target,
                "kernels": dict(self.keys_by_kernel), "failures": list(self.failures), "stats": stats,
                "origin": self.origin, "worker_choice": self.worker_choice,
                **({k: v for k, v in self.report.to_dict().items()
                    if k.startswith(("generic_", "learned", "store"))} if self.report is not None
                   else {"generic_variants": 0, "generic_stats": None, "learned": 0, "learned_through_keys": 0,
                         "learned_skipped": [], "learned_file": None, "store": None})}


@dataclass(frozen=True)
class RequestPathCost:
    """Compile and load work that landed on the request path (after warm-up).

    Attributes:
        compiles: runtime compiles (in-process cache misses: compiled or loaded from disk).
        compile_ms: milliseconds inside those compiles (Triton's cache hook to its post-compile
            hook).
        loads: modules loaded on the request path (a GPU's first launch of a variant that was
            compiled but not loaded: Triton's ``warmup()`` leaves these).
        cold_steps: steps that compiled or loaded something.
        extra_ms: the cold steps' time beyond the median step (compile, load, launcher build).
    """

    compiles: int = 0
    compile_ms: float = 0.0
    loads: int = 0
    cold_steps: int = 0
    extra_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"compiles": self.compiles, "compile_ms": round(self.compile_ms, 3), "loads": self.loads,
                "cold_steps": self.cold_steps, "extra_ms": round(self.extra_ms, 3)}


@dataclass(frozen=True)
class CheckReport:
    """Checked steps against the PyTorch references.

    Attributes:
        where: ``"interpreter"`` (a TRITON_INTERPRET=1 child process) or ``"cuda"``.
        steps: the checked step indices.
        outputs: kernel outputs compared.
        mismatches: one line per differing output (``"step 12: K1 decode out: ..."``).
        seconds: wall time of the check.
    """

    where: str
    steps: tuple[int, ...]
    outputs: int
    mismatches: tuple[str, ...]
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def to_dict(self) -> dict[str, Any]:
        return {"where": self.where, "steps": list(self.steps), "outputs": self.outputs,
                "mismatches": list(self.mismatches), "ok": self.ok, "seconds": round(self.seconds, 3)}


@dataclass(frozen=True)
class KVCacheSummary:
    """The paged KV cache a run allocated, as values (KERNELS.md "Strides").

    Attributes:
        num_blocks: blocks per layer in each cache (block ids ``0 .. num_blocks - 1``).
        handed_out: blocks the allocator hands out per rank (the rest: the window cache's extra
            ``S - 1`` blocks per main block under DCP, see :func:`kv_blocks_per_rank`).
        layers_per_pack: layer slots per pack tensor of the main cache (1: dense).
        block_stride_rows: rows between consecutive block ids of the main cache (K1's).
        compressed_block_strides: ``{ratio: rows}`` of every compressed cache (K2's).
        swa_block_stride_rows: rows between consecutive block ids of the window cache (K6's).
        bytes: bytes of every tensor of the cache.
    """

    num_blocks: int
    handed_out: int
    layers_per_pack: int
    block_stride_rows: int
    compressed_block_strides: dict[int, int]
    swa_block_stride_rows: int
    bytes: int

    @classmethod
    def of(cls, cache: PagedKVCache, handed_out: int) -> "KVCacheSummary":
        """The summary of an allocated cache of which ``handed_out`` blocks per rank are used."""
        return cls(cache.num_blocks, handed_out, cache.layers_per_pack, cache.block_stride_rows,
                   dict(cache.compressed_block_strides), cache.swa_block_stride_rows, cache.nbytes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every field; ``compressed_block_strides`` as ``[{"ratio", "block_stride_rows"}]``
        (JSON object keys would turn the ratios into strings)."""
        d = dataclasses.asdict(self)
        d["compressed_block_strides"] = [{"ratio": c, "block_stride_rows": r}
                                         for c, r in self.compressed_block_strides.items()]
        return d

    def summary(self) -> str:
        """One line, as the run report prints it."""
        comp = ", ".join(f"ratio {c}: {s}" for c, s in self.compressed_block_strides.items())
        return (f"{count(self.num_blocks, 'block')} ({self.handed_out} handed out), "
                f"{count(self.layers_per_pack, 'layer')} per pack: block_stride_rows {self.block_stride_rows}, "
                f"compressed {{{comp}}}, swa {self.swa_block_stride_rows}; {self.bytes / 2**20:.0f} MiB")


def _nearest_rank(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ascending ``ordered`` (nearest rank: the smallest value with at least
    ``q`` of the values at or below it)."""
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]


@dataclass(frozen=True)
class StepTimes:
    """The replay's step times (milliseconds of wall time, inputs built to kernels returned; on a
    GPU to the step's synchronize), what the first-step and pause goals are checked on.

    Attributes:
        steps: timed steps.
        first_ms: the first step, ``first_tokens`` tokens of which ``first_prefills`` prefills
            (a trace's first step is a prefill: compare it with ``median_prefill_ms``).
        first_over_prefill_median: ``first_ms / median_prefill_ms``, the first-step goal's ratio
            (issue 33: the first replayed step against the median of the steps with prefills,
            the first step counted among them; None when no step has a prefill).
        median_ms, p99_ms, max_ms: over every timed step (p99: nearest rank).
        median_decode_ms, median_prefill_ms: over the steps without / with prefills (None: none).
        max_step: the slowest step's index; ``max_tokens``, ``max_prefills``, ``max_decodes`` its size.
        max_cpu_ms: this thread's CPU time in the slowest step; far below ``max_ms``, the step
            waited for the CPU (another process ran: noise, not the step's own cost).
        max_cpu_step_ms: the largest CPU time of any step.
        first_cpu_ms, median_cpu_ms: this thread's CPU time in the first step, and its median
            over the steps (on a loaded machine, the steps' own cost without the waits).
        gc_in_steps: Python garbage collections that ran inside a timed step, and
            ``gc_in_steps_ms`` their milliseconds; ``gc_between_steps``: the others of the replay.
    """

    steps: int
    first_ms: float
    first_tokens: int
    first_prefills: int
    median_ms: float
    p99_ms: float
    max_ms: float
    median_decode_ms: float | None
    median_prefill_ms: float | None
    max_step: int
    max_tokens: int
    max_prefills: int
    max_decodes: int
    max_cpu_ms: float
    max_cpu_step_ms: float
    first_cpu_ms: float = 0.0
    median_cpu_ms: float = 0.0
    gc_in_steps: int = 0
    gc_in_steps_ms: float = 0.0
    gc_between_steps: int = 0

    @classmethod
    def of(cls, replay: "Replay") -> "StepTimes | None":
        """The step times of a replay (None when it timed no step)."""
        ms = replay.step_ms
        if not ms:
            return None
        ordered = sorted(ms)
        slowest = max(range(len(ms)), key=ms.__getitem__)
        step, first = replay.timed_steps[slowest], replay.timed_steps[0]
        prefill = [m for m, i in zip(ms, replay.timed_steps) if replay.step_prefills[i]]
        decode = [m for m, i in zip(ms, replay.timed_steps) if not replay.step_prefills[i]]
        in_steps = [c for c in replay.collections if c[2] is not None]
        return cls(
            steps=len(ms), first_ms=ms[0], first_tokens=replay.step_tokens[first],
            first_prefills=replay.step_prefills[first], median_ms=statistics.median(ms),
            p99_ms=_nearest_rank(ordered, 0.99), max_ms=ordered[-1],
            median_decode_ms=statistics.median(decode) if decode else None,
            median_prefill_ms=statistics.median(prefill) if prefill else None,
            max_step=step, max_tokens=replay.step_tokens[step], max_prefills=replay.step_prefills[step],
            max_decodes=replay.step_decodes[step], max_cpu_ms=replay.step_cpu_ms[slowest],
            max_cpu_step_ms=max(replay.step_cpu_ms), first_cpu_ms=replay.step_cpu_ms[0],
            median_cpu_ms=statistics.median(replay.step_cpu_ms), gc_in_steps=len(in_steps),
            gc_in_steps_ms=sum(c[1] for c in in_steps) * 1e3,
            gc_between_steps=len(replay.collections) - len(in_steps))

    @property
    def first_over_prefill_median(self) -> float | None:
        """``first_ms / median_prefill_ms`` (None: no step has a prefill)."""
        return self.first_ms / self.median_prefill_ms if self.median_prefill_ms else None

    def to_dict(self) -> dict[str, Any]:
        fields = dict(dataclasses.asdict(self), first_over_prefill_median=self.first_over_prefill_median)
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in fields.items()}

    def summary(self) -> tuple[str, str]:
        """The report's two lines: the first step against the median; the pauses."""
        med = self.median_ms or 1.0
        kinds = ", ".join(f"{what} {v:.2f} ms" for what, v in (("decode-only steps", self.median_decode_ms),
                                                               ("steps with prefills", self.median_prefill_ms))
                          if v is not None)
        kind = "a prefill step" if self.first_prefills else "a decode-only step"
        cpu = (f"{self.max_cpu_ms:.2f} ms of it on the CPU, the rest waiting for it" if self.max_cpu_ms < self.max_ms / 2
               else f"{self.max_cpu_ms:.2f} ms on the CPU")
        goal = ("" if self.first_over_prefill_median is None else
                f" = {self.first_over_prefill_median:.2f}x the median of steps with prefills")
        return (
            f"first {self.first_ms:.2f} ms ({kind}, {count(self.first_tokens, 'token')}){goal}; median of all "
            f"steps {self.median_ms:.2f} ms, the first {self.first_ms / med:.1f}x it (medians: {kinds}; CPU time: first "
            f"{self.first_cpu_ms:.2f} ms, median {self.median_cpu_ms:.2f} ms)",
            f"p99 {self.p99_ms:.2f} ms, max {self.max_ms:.2f} ms = {self.max_ms / med:.1f}x the median (step "
            f"{self.max_step}: {count(self.max_tokens, 'token')}, {count(self.max_prefills, 'prefill')}, "
            f"{count(self.max_decodes, 'decode')}; {cpu}); a step's most CPU "
            f"time {self.max_cpu_step_ms:.2f} ms; gc {count(self.gc_in_steps, 'collection')} in steps "
            f"({self.gc_in_steps_ms:.1f} ms), {self.gc_between_steps} between",
        )


@dataclass(frozen=True)
class RunReport:
    """Everything ``zerojit run`` reports; :meth:`to_dict` is its ``--json`` output.

    ``request_path_compiles``, ``fallback_launches``, ``background_compiles``, ``swaps``,
    ``background_failures``: the
    monitor's counts of the same names (:class:`~zerojit.monitor.MonitorCounts`; a request-path
    compile is a runtime compile that compiled or loaded, not one error mode blocked). ``background_idle``: in fallback mode,
    whether the background compiles had all ended when the report was made (None: other modes).
    ``cut``: the variants :func:`cut_keyspace` dropped (``kernel: key``). ``zero_output``: the
    trace rows with 0 generated tokens, replayed with 1 (:attr:`Trace.zero_output`).
    ``requests_asked``: :attr:`RunOptions.requests` (None: the whole trace); the report notes a
    trace shorter than that.

    With ``monitor_mode`` ``"off"`` no monitor is installed and nothing is counted: ``launches``,
    ``runtime_compiles``, the serving counts and ``audit`` are None (not 0: a compile at run time
    goes unseen by the monitor). ``request_path`` is the request-path clock's, which hooks Triton
    itself and is measured in every mode.
    """

    config: ModelConfig
    backend: str
    device: str
    target: str | None
    monitor_mode: str
    trace: str
    requests: int
    clipped: int
    steps: int
    tokens: int
    prefill_tokens: int
    decode_tokens: int
    preemptions: int
    launches: int | None
    warmup: WarmupSummary
    runtime_compiles: int | None
    request_path: RequestPathCost
    first_step_ms: float
    median_step_ms: float
    max_step_ms: float
    replay_seconds: float
    total_seconds: float
    kv_cache: KVCacheSummary
    audit: CoverageAudit | None
    checks: CheckReport | None = None
    step_times: StepTimes | None = None
    primer_steps: int = 0
    primer_seconds: float = 0.0
    request_path_compiles: int | None = 0
    fallback_launches: int | None = 0
    background_compiles: int | None = 0
    swaps: int | None = 0
    background_idle: bool | None = None
    background_failures: int | None = 0
    cut: tuple[str, ...] = ()
    graphs: GraphReport | None = None
    zero_output: int = 0
    requests_asked: int | None = None

    @property
    def counted(self) -> bool:
        """Whether a monitor counted the run (every mode but ``off``)."""
        return self.monitor_mode != "off"

    @property
    def ok(self) -> bool | None:
        """With a zerojit warm-up: zero request-path compiles in fallback mode (a miss served by a
        generic variant and compiled in the background is no failure), zero runtime compiles in
        the other modes; every check passed; with CUDA graphs, nothing compiled during capture or
        replay and every graph step checked equals its eager launch.

        Monitor off: False when the request-path clock saw a compile or a check failed, else None
        (nothing was counted, so no zero can be claimed)."""
        checked = (self.checks is None or self.checks.ok) and (self.graphs is None or self.graphs.ok)
        if not self.counted:
            return False if not checked or (self.request_path.compiles and self.warmup.mode == "zerojit") else None
        compiles = self.request_path_compiles if self.monitor_mode == "fallback" else self.runtime_compiles
        zero = compiles == 0 or self.warmup.mode != "zerojit"
        return zero and checked

    def audit_counts(self) -> dict[str, int] | None:
        if self.audit is None:  # monitor off: nothing counted to audit
            return None
        return {
            "misses": sum(len(k.misses) for k in self.audit.kernels) + len(self.audit.direct),
            "dead": self.audit.dead_warmups,
            "warmed": sum(len(k.warmed) for k in self.audit.kernels),
            "runtime_compiles": self.audit.runtime_compiles,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.name,
            "config_fields": self.config.to_dict(),
            "backend": self.backend,
            "device": self.device,
            "target": self.target,
            "monitor_mode": self.monitor_mode,
            "trace": self.trace,
            "requests": self.requests,
            "clipped": self.clipped,
            "zero_output": self.zero_output,
            "steps": self.steps,
            "tokens": self.tokens,
            "prefill_tokens": self.prefill_tokens,
            "decode_tokens": self.decode_tokens,
            "preemptions": self.preemptions,
            "launches": self.launches,
            "warmup": self.warmup.to_dict(),
            "runtime_compiles": self.runtime_compiles,
            "request_path_compiles": self.request_path_compiles,
            "fallback_launches": self.fallback_launches,
            "background_compiles": self.background_compiles,
            "swaps": self.swaps,
            "background_idle": self.background_idle,
            "background_failures": self.background_failures,
            "cut_keyspace": list(self.cut),
            "request_path": self.request_path.to_dict(),
            "first_step_ms": round(self.first_step_ms, 3),
            "median_step_ms": round(self.median_step_ms, 3),
            "max_step_ms": round(self.max_step_ms, 3),
            "step_times": self.step_times.to_dict() if self.step_times is not None else None,
            "primer": {"steps": self.primer_steps, "seconds": round(self.primer_seconds, 4)},
            "replay_seconds": round(self.replay_seconds, 3),
            "total_seconds": round(self.total_seconds, 3),
            "kv_cache": self.kv_cache.to_dict(),
            "audit": {**self.audit_counts(), "detail": self.audit.to_dict()} if self.audit is not None else None,
            "checks": self.checks.to_dict() if self.checks is not None else None,
            "cuda_graphs": self.graphs.to_dict() if self.graphs is not None else None,
            "ok": self.ok,
        }

    def summary(self) -> str:
        """The human-readable report."""
        c, w, rp = self.config, self.warmup, self.request_path
        dcp = f", DCP {c.dcp_size} rank {c.dcp_rank}" if c.dcp_size > 1 else ""
        where = f"{self.device} (dry launches, compile-only {self.target})" if self.target else self.device
        lines = [
            f"zerojit run: {c.name} ({count(c.num_layers, 'layer')}, block_size {c.block_size}{dcp}, "
            f"{count(c.num_speculative_tokens, 'speculative token')}), backend {self.backend}, on {where}",
            f"  trace        {self.trace}: {count(self.requests, 'request')} ({self.clipped} clipped to max_model_len, "
            f"{self.zero_output} with 0 output tokens given 1)",
            *([f"               note: --requests {self.requests_asked}: the trace has "
               f"{count(self.requests, 'request')}; replaying all of them"]
              if self.requests_asked is not None and self.requests_asked > self.requests else []),
            f"  replay       {count(self.steps, 'step')}, {count(self.tokens, 'token')} ({self.prefill_tokens} "
            f"prefill, {self.decode_tokens} decode), {count(self.preemptions, 'preemption')}, "
            f"{count(self.launches, 'launch', 'launches') if self.counted else 'launches not counted'}, "
            f"{self.replay_seconds:.1f} s",
            f"  warm-up      {w.mode}: {count(w.keys, 'key')}"
            + (f" + {count(w.report.generic_variants, 'generic variant')}" if w.report is not None
               and w.report.generic_variants else "")
            + f" in {w.seconds:.2f} s ({count(len(w.failures), 'failure')})"
            + (f", {w.worker_choice}" if w.worker_choice else "") + (f"; {w.origin}" if w.origin else ""),
            *(w.report.stats.notes("               note: ") if w.report is not None and w.report.stats else ()),
            *(w.report.generic_lines("               ") if w.report is not None else ()),
            *(w.report.store.lines("               ") if w.report is not None and w.report.store else ()),
            *(w.report.learned_lines("               ") if w.report is not None else ()),
            f"  monitor      {self.monitor_mode}: "
            + (count(self.runtime_compiles, 'runtime compile') if self.counted else "runtime compiles not counted")
            + (f"; {self.serving_counts()}" if self.monitor_mode == "fallback" else ""),
            *(f"               cut: {c}" for c in self.cut),
            f"  request path {count(rp.compiles, 'compile')} ({rp.compile_ms:.1f} ms compiling), "
            f"{count(rp.loads, 'module load')}, {count(rp.cold_steps, 'cold step')} (steps that compiled or loaded "
            f"a module: +{rp.extra_ms:.1f} ms over the median step)",
            *self._step_time_lines(),
            f"  KV cache     {self.kv_cache.summary()}",
        ]
        counts = self.audit_counts()
        if counts is None:  # (an audit of no counts would call every warmed key dead and claim no miss)
            lines.append("  audit        not taken (monitor off: no hit or miss counted)")
        else:
            served = sum(k.fallback_launches for k in self.audit.kernels)
            served_line = f", {count(served, 'launch', 'launches')} of missing keys served by generic variants"
            lines.append(f"  audit        {count(counts['warmed'], 'warmed key')}, {counts['dead']} dead, "
                         f"{counts['misses']} missed" + (served_line if served else ""))
        for k in self.audit.kernels if self.audit is not None else ():  # a table: the nouns agree with the numbers beside them
            lines.append(f"    {k.kernel:<36} {len(k.warmed):>3} warmed {len(k.dead):>3} dead {k.hits:>8} "
                         f"{'hit ' if k.hits == 1 else 'hits'} {k.runtime_compiles:>4} "
                         f"{'miss' if k.runtime_compiles == 1 else 'misses'}")
            lines += [f"      dead: {w.key}" for w in k.dead]
            lines += [f"      MISS: {m.arguments} ({m.nearest})" for m in k.misses]
            if k.fallback_launches:
                lines.append(f"      SERVED: {count(k.fallback_launches, 'launch', 'launches')} in classes the warm-up "
                             "lacked, by a generic variant (compiled in the background, learned)")
        lines += [f"    note: {n}" for n in self.audit.dead_notes()] if self.audit is not None else []
        if self.checks is not None:
            ch = self.checks
            verdict = "all equal" if ch.ok else count(len(ch.mismatches), "MISMATCH", "MISMATCHES")
            lines.append(f"  checks       {count(len(ch.steps), 'step')} ({ch.where}) {list(ch.steps)}: "
                         f"{count(ch.outputs, 'output')}, {verdict} ({ch.seconds:.1f} s)")
            lines += [f"    {m}" for m in ch.mismatches[:20]]
        if self.graphs is not None:
            lines.append(f"  graphs       {self.graphs.summary()}")
            lines += [f"    {m}" for m in self.graphs.mismatches[:20]]
        lines.append(f"  total        {self.total_seconds:.1f} s")
        if not self.counted:  # no zero to claim; what the clock saw is said
            lines.append("monitor off: runtime compiles not counted" + (
                f"; {count(rp.compiles, 'REQUEST-PATH COMPILE', 'REQUEST-PATH COMPILES')} after warm-up timed by "
                "the request-path clock" if rp.compiles else ""))
        elif self.warmup.mode == "zerojit" and self.monitor_mode == "fallback":
            lines.append(f"zero request-path compiles ({count(self.fallback_launches, 'fallback launch', 'fallback launches')})"
                         if self.request_path_compiles == 0
                         else f"{count(self.request_path_compiles, 'REQUEST-PATH COMPILE', 'REQUEST-PATH COMPILES')} after warm-up")
        elif self.warmup.mode == "zerojit":
            lines.append("zero runtime compiles" if self.runtime_compiles == 0
                         else f"{count(self.runtime_compiles, 'RUNTIME COMPILE', 'RUNTIME COMPILES')} after warm-up")
        else:
            lines.append(f"--warmup {self.warmup.mode}: {count(rp.compiles, 'compile')} and {rp.extra_ms:.0f} ms on "
                         "the request path (zerojit: 0)")
        return "\n".join(lines)

    def serving_counts(self) -> str:
        """Fallback mode's four counts, as the monitor line gives them (and the background
        compiles that failed, where any did)."""
        idle = "" if self.background_idle in (None, True) else f" (still compiling after {BACKGROUND_WAIT_S:.0f} s)"
        if self.background_failures:
            idle += f" ({self.background_failures} failed: their generic variants kept serving)"
        return (f"{count(self.request_path_compiles, 'request-path compile')}, "
                f"{count(self.fallback_launches, 'fallback launch', 'fallback launches')}, "
                f"{count(self.background_compiles, 'background compile')}{idle}, {count(self.swaps, 'swap')}")

    def _step_time_lines(self) -> list[str]:
        primer = f"; primer {count(self.primer_steps, 'step')}, {self.primer_seconds * 1e3:.0f} ms" if self.primer_steps else ""
        if self.step_times is None:
            return [f"  step time    first {self.first_step_ms:.2f} ms, median {self.median_step_ms:.2f} ms, "
                    f"max {self.max_step_ms:.2f} ms{primer}"]
        first, pauses = self.step_times.summary()
        return [f"  step time    {first}{primer}", f"  pauses       {pauses}"]

    def __str__(self) -> str:
        return self.summary()


# ---------------------------------------------------------------------------------------------
# The pipeline
# ---------------------------------------------------------------------------------------------


def run(options: RunOptions | None = None, *, group: Any = None, before_first_step: Callable[[], Any] | None = None,
        after_step: Callable[[int, float], Any] | None = None) -> RunReport:
    """Run the reference runner (the pipeline in the module docstring) and return its report
    (``options`` None: the defaults, :class:`RunOptions` ``()``, checked when called: checking
    the target asks Triton's ``ptxas``, which importing this module must not).

    The keyword arguments make one run a rank of a tensor-parallel group (used by
    ``benchmarks/tensor_parallel.py``; the CLI passes none):

    - ``group``: a ``torch.distributed`` process group; the zerojit warm-up is sharded across
      its ranks (:meth:`JitWarmupRegistry.warmup` ``group=``), every rank calling ``run`` with the
      same options.
    - ``before_first_step()``: called once after the primer (and the cut), right before the first
      step, outside the primer's time: where a group's start-up barrier goes.
    - ``after_step(step, ms)``: called after every step with its index and its wall milliseconds,
      outside the step's timing and before fallback mode's ``between_requests`` (a rank's
      all-reduce: its own time is the caller's to measure, never a step's).

    Raises:
        RunError: ``group`` with a ``triton`` or ``none`` warm-up (only zerojit's is sharded).
        ConfigError: an invalid config (every bad field listed), BackendError: a backend that
            cannot serve it, TraceError: a malformed trace row (naming the line),
        CacheFolderError: Triton's cache folder cannot serve (in every warm-up mode),
        RuntimeJitError: a runtime compile in error mode, RunError: options that cannot run,
        WarmupError: keys that failed to compile. Checked outputs that differ from the references
        are reported (``report.checks``, ``report.ok``), not raised.
    """
    start = time.perf_counter()
    options = RunOptions() if options is None else options
    if group is not None and options.warmup != "zerojit":
        raise RunError(f"group= shards the zerojit warm-up; warmup={options.warmup!r} has none to shard")
    config = load_config(options.config, **options.config_overrides)                      # 1.
    device = options.resolved_device()
    trace = _load_trace(options, config)
    target = options.target if device.type == "cpu" else None
    num_blocks = kv_blocks_per_rank(config, options.kv_cache_tokens)

    with _compile_target(target), _triton_cache_dir(options):
        registry = JitWarmupRegistry()
        with registry.activate():
            model = SparseMLAModel(config, options.backend)                                  # 2.
            cache = allocate_kv_cache(config, num_blocks * config.dcp_size, device=device)   # 3.
            model.bind_kv_cache(cache)
        plan = MetadataPlan.for_cache(config, model.backend, cache)
        _check_step_memory(plan, device)
        warmup = warm_up(registry, config, options, target=target or "device", group=group)  # 4.
        check_steps = _cuda_check_steps(trace, config, options, device)
        no_warmup = f"--warmup {options.warmup}" if options.warmup == "none" else None
        primed = [0, 0.0]  # steps, seconds
        mode = options.monitor_mode
        serving = None
        if mode == "fallback":  # the serving layer: only where fallback serves (the other modes never import it)
            import zerojit.serving as serving
        cut: list[str] = []

        def prime() -> None:
            t0 = time.perf_counter()
            if options.warmup == "zerojit":  # the comparison modes measure what lands on the first step
                primed[0] = primer_steps(plan, device, options.seed, warmup.report)
                if options.cut_keyspace:  # after the primer, which proves the uncut coverage
                    cut.extend(cut_keyspace(registry, warmup.report))
                monitor.reset()  # the replay's counts and audit are the trace's alone
            elif device.type == "cuda":
                _warm_host_ops(plan, device, options.seed)
            primed[1] = time.perf_counter() - t0
            if before_first_step is not None:
                before_first_step()

        # The clock goes under the run's monitor, whose link is then on top of Triton's hook chain
        # (it blocks before the clock counts); the clock's hook names the one it calls, so the
        # process monitor below it and the primer's monitor above it find their places through it.
        served = dict(fallback=options.fallback_options()) if serving is not None else {}
        with _RequestPathClock() as clock, \
                JitMonitor(mode, report=warmup.report, no_warmup_note=no_warmup,
                           learn=options.learn_cut or not options.cut_keyspace,
                           **served) as monitor:  # 5. (a cut key space's misses are no keys to learn unless asked)
            graphs = (DecodeGraphs(plan, device, seed=options.seed, checks=options.checks_for(device),
                                   compile_marker=clock.marker) if options.cuda_graphs else None)
            replay = replay_trace(trace, plan, num_blocks=num_blocks, device=device, seed=options.seed,  # 6.
                                  step_interval_s=options.step_interval_s, check_steps=check_steps,
                                  progress=options.progress, clock=clock, prime=prime,
                                  between=serving.between_requests if serving is not None else None,
                                  after_step=after_step, graphs=graphs)
            # The background compiles the trace started: waited for (with a deadline), so that
            # the report counts what they did, and the ready ones swapped in (after the last
            # step: between requests); one still running then is reported, not waited on.
            idle = None
            if serving is not None:
                idle = serving.wait_idle(BACKGROUND_WAIT_S)
                serving.between_requests()
            counts = monitor.counts()
        # Monitor off: nothing was counted (counts() is all zeros), so no count is reported; the
        # request path's compiles are then the clock's, which hooks Triton in every mode.
        counted = mode != "off"
        audit = build_audit(warmup.report, monitor) if counted else None
    runtime_compiles = (counts.runtime_compiles + counts.direct_compiles + counts.direct_disk_loads
                        if counted else None)

    def monitored(value: Any) -> Any:
        return value if counted else None

    checks = replay.checks
    if device.type == "cpu" and options.checks_for(device):
        steps = choose_check_steps(replay.summaries, options.checks_for(device), options.seed,
                                   max_tokens=options.check_max_tokens)
        checks = check_in_interpreter(options, steps, timeout_s=round(check_deadline_s(len(steps), replay.seconds)))

    report = RunReport(                                                                      # 7.
        config=config, backend=model.backend.name, device=device.type, target=target,
        monitor_mode=mode, trace=str(options.trace_path), requests=len(trace), requests_asked=options.requests,
        clipped=trace.clipped, zero_output=trace.zero_output, steps=replay.steps, tokens=replay.tokens,
        prefill_tokens=replay.prefill_tokens, decode_tokens=replay.decode_tokens, preemptions=replay.preemptions, launches=monitored(counts.launches),
        warmup=warmup, runtime_compiles=runtime_compiles,
        request_path=replay.request_path(counts.runtime_compiles if counted else replay.compiles),
        first_step_ms=replay.step_ms[0] if replay.step_ms else 0.0,
        median_step_ms=statistics.median(replay.step_ms) if replay.step_ms else 0.0,
        max_step_ms=max(replay.step_ms, default=0.0), replay_seconds=replay.seconds,
        total_seconds=time.perf_counter() - start, kv_cache=KVCacheSummary.of(cache, num_blocks), audit=audit,
        checks=checks, step_times=StepTimes.of(replay), primer_steps=primed[0], primer_seconds=primed[1],
        # (counts without the serving fields: a runtime compile that was not blocked waited on the request path)
        request_path_compiles=monitored(getattr(counts, "request_path_compiles", (runtime_compiles or 0) - counts.blocked)),
        fallback_launches=monitored(getattr(counts, "fallback_launches", 0)),
        background_compiles=monitored(getattr(counts, "background_compiles", 0)),
        swaps=monitored(getattr(counts, "swaps", 0)),
        background_failures=monitored(getattr(counts, "background_failures", 0)),
        background_idle=idle, cut=tuple(cut), graphs=graphs.report if graphs is not None else None,
    )
    return report


def _load_trace(options: RunOptions, config: ModelConfig) -> Trace:
    """The run's trace, or a :class:`RunError` saying why the file cannot be one.

    Raises:
        RunError: the file does not exist, is a directory, cannot be read, or holds no request.
        TraceError: a malformed row or a byte that is not UTF-8 (naming the line).
    """
    path = options.trace_path
    if path.is_dir():
        raise RunError(f"trace file {str(path)!r} is a directory, not a CSV file")
    if not path.exists():
        raise RunError(f"trace file {str(path)!r} does not exist")
    try:
        trace = load_trace(path, limit=options.requests, max_model_len=config.max_model_len)
    except OSError as e:
        raise RunError(f"trace file {str(path)!r} cannot be read: {e.strerror or e}") from None
    if not len(trace):
        raise RunError(f"trace {str(path)!r} has no requests (a header and no rows)")
    return trace


def available_memory(device: torch.device) -> int | None:
    """Bytes this process can still allocate on ``device`` (CUDA: free device memory; CPU: the
    kernel's ``MemAvailable``, else physical memory), None when unknown."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _check_step_memory(plan: MetadataPlan, device: torch.device) -> None:
    """Refuse, before warm-up, a config whose largest step cannot fit the device's memory.

    Raises:
        RunError: the step's ``[tokens, index_topk]`` tensors alone exceed the memory available
            (:meth:`MetadataPlan.largest_topk_tensors`), naming the two fields to lower.
    """
    need, names = plan.largest_topk_tensors()
    have = available_memory(device)
    if have is None or need <= have:
        return
    c = plan.config
    raise RunError(
        f"config {c.name}: a step of max_num_batched_tokens={c.max_num_batched_tokens} tokens needs at least "
        f"{need / 2**30:,.1f} GiB for its [tokens, index_topk={c.index_topk}] int32 tensors ({', '.join(names)}), "
        f"more than the {have / 2**30:,.1f} GiB available on {device.type}; lower index_topk or max_num_batched_tokens")


def kv_blocks_per_rank(config: ModelConfig, kv_cache_tokens: int) -> int:
    """Main-cache blocks the allocator hands out on each rank: ``cdiv(tokens, block_size * S)``
    (a block-table entry covers ``block_size * S`` tokens of a sequence, ``block_size`` per rank).

    The cache is allocated with ``S`` times as many blocks, for the sliding-window cache, which
    DCP does not split (see :mod:`zerojit.runner.metadata`).
    """
    per_block = config.block_size * config.dcp_size
    longest = -(-config.max_model_len // per_block) + 1  # the longest request, plus the null block
    return max(-(-kv_cache_tokens // per_block), longest)


@contextlib.contextmanager
def _compile_target(target: str | None) -> Iterator[None]:
    """Compile-only for ``target`` (no GPU: warm-up compiles cubins, launches are dry), or nothing."""
    if target is None:
        yield
        return
    from zerojit.compile_only import compile_only

    with compile_only(target):
        yield


@contextlib.contextmanager
def _triton_cache_dir(options: RunOptions) -> Iterator[None]:
    """A new, empty Triton cache directory for the run when asked (always for triton / none)."""
    if not (options.fresh_triton_cache or options.warmup != "zerojit"):
        yield
        return
    previous = triton_compat.cache_dir()
    with tempfile.TemporaryDirectory(prefix="zerojit-run-triton-cache-") as tmp:
        triton_compat.set_cache_dir(tmp)
        try:
            yield
        finally:
            triton_compat.set_cache_dir(previous)


# ---------------------------------------------------------------------------------------------
# 4. Warm-up
# ---------------------------------------------------------------------------------------------


def warm_up(registry: JitWarmupRegistry, config: ModelConfig, options: RunOptions, *, target: str,
            group: Any = None) -> WarmupSummary:
    """Warm up the registered kernels the way ``options.warmup`` says.

    ``zerojit``: :meth:`JitWarmupRegistry.warmup` (raises :class:`WarmupError` on a failure),
    sharded across ``group``'s ranks when given (a ``torch.distributed`` process group).
    ``triton``: for every key the registry would warm, Triton's ``JITFunction.warmup`` (its
    ``run(..., warmup=True)``), reached through the kernel's own launcher with the kernel's
    ``warmup_inputs(key)``, so the arguments are exactly the launch's; nothing is loaded.
    ``none``: nothing.

    Raises:
        RunError: ``triton`` / ``none`` in a process whose kernels already hold compiled
            variants (run each comparison in a fresh process).
    """
    if options.warmup != "zerojit":
        _require_fresh_process(registry, options.warmup)
    if options.warmup == "zerojit":
        report = registry.warmup(config, progress=options.progress, workers=options.warmup_workers, target=target,
                                 generic=options.generic, learned=options.learned, store=options.store, group=group)
    elif options.warmup == "triton":
        report = _triton_warmup(registry, config, target, progress=options.progress)
    else:
        report = WarmupReport(kernels=(), target=target)
    if options.progress and report.kernels:
        print(report.summary(), file=sys.stderr, flush=True)
    return WarmupSummary(
        mode=options.warmup, keys=report.num_keys, seconds=report.seconds, target=report.target,
        keys_by_kernel={k.kernel: len(k.keys) for k in report.kernels},
        failures=tuple(str(f) for f in report.failures), report=report,
    )


def cut_keyspace(registry: JitWarmupRegistry, report: WarmupReport) -> list[str]:
    """Benchmarks only (``zerojit run --cut-keyspace``, ``benchmarks/fallback_runner.py``): cut one
    value class per kernel out of what the warm-up loaded, so that the trace misses there.

    For each kernel, its first warmed variant (warm-up order) whose classes are not its group's
    generic ones (:func:`zerojit.generic.generic_classes`: a 16-byte aligned pointer, an int
    divisible by 16 or equal to 1) is dropped from Triton's in-process cache on this device. The
    next launch of that key misses as a key warmed without that class would: in fallback mode
    the group's generic variant (still loaded: the warm-up compiled it from this key) serves it,
    in warn mode it compiles (from the disk cache: the warm-up wrote the entry), in error mode it
    is blocked. A kernel whose warmed variants are all generic already has no class to cut and
    is left whole. The launch paths this reaches are Triton's (``JITFunction.run``); a kernel on
    zerojit's fast path (``fast_path = True``) is left whole too, since its table still holds the
    variant. Call it after the primer, which proves the uncut coverage.

    Returns:
        ``"kernel: key"`` for each variant dropped.
    """
    from zerojit import generic

    device = triton_compat.current_device()
    kernels = {k.name: k for k in registry.kernels}
    dropped = []
    for warmed in report.kernels:
        kernel = kernels.get(warmed.kernel)
        jit_fn = triton_compat.unwrap_jit_function(getattr(kernel, "kernel", None))
        if jit_fn is None or getattr(kernel, "fast_path", False) or not triton_compat.has_device_cache(jit_fn, device):
            continue
        keep = getattr(kernel, "generic_keep", ())
        for v in warmed.variants:
            if v.triton_key and generic.generic_classes(jit_fn, v.specialization, keep) != tuple(v.specialization):
                if triton_compat.kernel_cache(jit_fn, device).pop(v.triton_key, None) is not None:
                    dropped.append(f"{warmed.kernel}: {v.key}")
                break
    return dropped


def _require_fresh_process(registry: JitWarmupRegistry, mode: str) -> None:
    device = triton_compat.current_device()
    held = [k.name for k in registry.kernels
            if triton_compat.has_device_cache(k.kernel, device) and triton_compat.kernel_cache(k.kernel, device)]
    if held:
        raise RunError(
            f"--warmup {mode} measures what lands on the request path, so it needs a fresh process: "
            f"{', '.join(held)} already hold compiled variants in this one; run it in a new process"
        )


def _triton_warmup(registry: JitWarmupRegistry, config: ModelConfig, target: str, *, progress: bool) -> WarmupReport:
    """Triton's own warm-up of every key the registry would warm (compile, no load)."""
    from tqdm.auto import tqdm

    from zerojit.specialization import bind, spec_classes

    start = time.perf_counter()
    plan, failures = registry.warmup_keys(config)
    kernels = []
    with tqdm(total=sum(len(v) for v in plan.values()), desc="triton warmup()", unit="key",
              disable=None if progress else True) as bar:
        for kernel, keys in plan.items():
            done, t_kernel = [], 0.0
            for key in keys:
                t0 = time.perf_counter()
                sink: list = []
                token = _WARMUP_SINK.set(sink)  # the launch becomes kernel.run(grid, warmup=True, **args)
                try:
                    kernel(**kernel.warmup_inputs(key))
                except Exception as e:  # reported, never hidden
                    failures.append(WarmupFailure(kernel.name, key, f"{type(e).__name__}: {e}"))
                    continue
                finally:
                    _WARMUP_SINK.reset(token)
                    t_kernel += time.perf_counter() - t0
                    bar.update()
                compiled, args = sink[0]
                _, spec, _ = bind(kernel.kernel, **args)
                triton_key = triton_compat.find_in_process_key(kernel.kernel, compiled,
                                                               triton_compat.current_device()) or ""
                done.append(CompiledVariant(
                    kernel=kernel.name, key=key, triton_key=triton_key,
                    specialization=spec_classes(kernel.kernel, spec),
                    param_names=tuple(p.name for p in kernel.kernel.params), loaded=False, compiled=compiled))
            kernels.append(KernelWarmup(kernel.name, tuple(v.key for v in done), tuple(done), t_kernel))
    return WarmupReport(kernels=tuple(kernels), failures=tuple(failures), seconds=time.perf_counter() - start,
                        target=target)


# ---------------------------------------------------------------------------------------------
# 5. What lands on the request path
# ---------------------------------------------------------------------------------------------


class _RequestPathClock:
    """Times compiles and module loads after warm-up, chained onto Triton's hooks.

    Compiles: from Triton's ``jit_cache_hook`` (before compiling) to its
    ``jit_post_compile_hook`` (after), both chained (the hook set before is called too; the
    cache hook names it, :data:`~zerojit.monitor.CHAINED_TO`, so that a monitor below the clock
    still finds itself in the chain: the process monitor under the run's, or the run's under
    the primer's). Entered before the run's monitor, whose link then sits above it.
    Loads: Triton's ``kernel_load_start_hook`` / ``kernel_load_end_hook`` chains (a GPU's module
    load; nothing loads under compile-only).
    """

    def __init__(self) -> None:
        self.compile_s = 0.0
        self.misses = 0
        self.loads = 0
        self._starts: dict[str, float] = {}
        self._load_t0: float | None = None
        self._prev: tuple[Any, Any] = (None, None)
        self._cache_hook = _ChainedCacheHook(self)

    def _on_cache(self, **kw: Any) -> Any:
        t = time.perf_counter()
        prev = self._prev[0]
        result = prev(**kw) if prev is not None else None
        self.misses += 1  # counted before the monitor above this clock raises (error mode)
        self._starts[kw.get("key")] = t
        return result

    def _on_post(self, **kw: Any) -> Any:
        prev = self._prev[1]
        result = prev(**kw) if prev is not None else None
        t0 = self._starts.pop(kw.get("key"), None)
        if t0 is not None:
            self.compile_s += time.perf_counter() - t0
        return result

    def _on_load_start(self, *args: Any) -> None:
        self._load_t0 = time.perf_counter()

    def _on_load_end(self, *args: Any) -> None:
        if self._load_t0 is not None:
            self.loads += 1
            self._load_t0 = None

    def __enter__(self) -> "_RequestPathClock":
        tc = triton_compat
        self._prev = (tc.get_cache_hook(), tc.get_post_compile_hook())
        tc.set_cache_hook(self._cache_hook)
        tc.set_post_compile_hook(self._on_post)
        tc.add_load_hooks(self._on_load_start, self._on_load_end)
        return self

    def __exit__(self, *exc: Any) -> None:
        tc = triton_compat
        if tc.get_cache_hook() is self._cache_hook:
            tc.set_cache_hook(self._prev[0])
        if tc.get_post_compile_hook() == self._on_post:
            tc.set_post_compile_hook(self._prev[1])
        tc.remove_load_hooks(self._on_load_start, self._on_load_end)

    def marker(self) -> tuple[int, int]:
        """Changes when a compile or a load happened since the last call."""
        return (self.misses, self.loads)


class _ChainedCacheHook:
    """The clock's ``jit_cache_hook``: calls the clock, and names the hook the clock calls first."""

    __slots__ = ("clock",)

    def __init__(self, clock: _RequestPathClock) -> None:
        self.clock = clock

    def __call__(self, **kw: Any) -> Any:
        return self.clock._on_cache(**kw)

    @property
    def zerojit_chained_to(self) -> Any:  # the name zerojit.monitor.CHAINED_TO gives
        return self.clock._prev[0]


# ---------------------------------------------------------------------------------------------
# 6. The scheduler loop
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepSummary:
    """One step, as check sampling sees it."""

    step: int
    num_tokens: int
    num_prefills: int
    num_decodes: int

    @classmethod
    def of(cls, batch: Batch) -> "StepSummary":
        return cls(batch.step, batch.num_tokens, batch.num_prefills, batch.num_decodes)


@dataclass
class Replay:
    """What :func:`replay_trace` saw: counts, per-step times and sizes, collections, checks.

    Per-step facts are kept as columns of plain numbers (``step_tokens[i]`` is step ``i``'s), not
    as one object per step: an object per step that lives to the end of the run is what makes
    Python's collector run during a long replay (see :func:`serving_collector`).

    Attributes:
        step_ms: wall milliseconds of each timed step (every launched or checked one), in order.
        step_cpu_ms: this thread's CPU milliseconds of the same steps (a step whose wall time is
            far above its CPU time waited for the CPU: another process ran).
        timed_steps: the step index of each timed step.
        step_tokens, step_prefills, step_decodes: every step's tokens, prefill and decode
            requests, by step index.
        collections: Python's garbage collections during the replay, as ``(generation,
            seconds, step)``; ``step`` is the timed step it ran inside, None between steps.
        compiles, compile_ms: the request-path clock's compiles during the steps (after the
            primer), and the milliseconds inside them.
    """

    steps: int = 0
    tokens: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    preemptions: int = 0
    seconds: float = 0.0
    step_ms: list[float] = field(default_factory=list)
    step_cpu_ms: list[float] = field(default_factory=list)
    timed_steps: list[int] = field(default_factory=list)
    step_tokens: list[int] = field(default_factory=list)
    step_prefills: list[int] = field(default_factory=list)
    step_decodes: list[int] = field(default_factory=list)
    cold: list[int] = field(default_factory=list)
    collections: list[tuple[int, float, int | None]] = field(default_factory=list)
    checks: CheckReport | None = None
    compiles: int = 0
    compile_ms: float = 0.0
    loads: int = 0

    @property
    def summaries(self) -> list[StepSummary]:
        """Every step's :class:`StepSummary`, by step index (built when asked)."""
        return [StepSummary(i, t, p, d) for i, (t, p, d)
                in enumerate(zip(self.step_tokens, self.step_prefills, self.step_decodes))]

    def request_path(self, compiles: int) -> RequestPathCost:
        median = statistics.median(self.step_ms) if self.step_ms else 0.0
        extra = sum(max(self.step_ms[i] - median, 0.0) for i in self.cold)
        return RequestPathCost(compiles=compiles, compile_ms=self.compile_ms, loads=self.loads,
                               cold_steps=len(self.cold), extra_ms=extra)


class _CollectorWatch:
    """Records Python's garbage collections while installed in ``gc.callbacks``: each as
    ``(generation, seconds, step)`` into ``collections``, ``step`` being what the replay set
    :attr:`step` to (the timed step running, or None between steps)."""

    def __init__(self, collections: list) -> None:
        self.collections = collections
        self.step: int | None = None
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.collections.append((info["generation"], time.perf_counter() - self._t0, self.step))

    def __enter__(self) -> "_CollectorWatch":
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        gc.callbacks.remove(self)


def make_scheduler(trace: Trace, config: ModelConfig, *, num_blocks: int,
                   step_interval_s: float | None) -> tuple[Scheduler, BlockAllocator]:
    """The continuous-batching scheduler over ``trace`` with the config's limits, and its
    allocator of ``num_blocks`` blocks of ``block_size * S`` tokens (see :func:`kv_blocks_per_rank`)."""
    limits = SchedulerLimits(
        max_num_batched_tokens=config.max_num_batched_tokens, max_num_seqs=config.max_num_seqs,
        max_model_len=config.max_model_len, num_speculative_tokens=config.num_speculative_tokens)
    allocator = BlockAllocator(num_blocks, config.block_size * config.dcp_size)
    return Scheduler(trace, limits, step_interval_s=step_interval_s, allocator=allocator), allocator


def replay_trace(
    trace: Trace,
    plan: MetadataPlan,
    *,
    num_blocks: int,
    device: torch.device,
    seed: int = 0,
    step_interval_s: float | None = 0.05,
    check_steps: Sequence[int] = (),
    launch: bool = True,
    progress: bool = False,
    clock: _RequestPathClock | None = None,
    prime: Callable[[], Any] | None = None,
    between: Callable[[], Any] | None = None,
    after_step: Callable[[int, float], Any] | None = None,
    graphs: DecodeGraphs | None = None,
) -> Replay:
    """Replay ``trace`` step by step, building every step's metadata through the kernels.

    Set-up (the scheduler, the step buffers), then :func:`serving_collector` (start-up's heap
    collected and frozen), then ``prime``, then the steps: what runs last before the first step
    is what the first step finds warm.

    Args:
        trace, plan: what to replay, and what each step launches.
        num_blocks: the allocator's blocks (per rank).
        device: cpu (dry launches under compile-only, or the interpreter) or cuda.
        seed: seeds each step's top-k draws.
        check_steps: steps whose values are filled and whose kernel outputs are compared with
            the references.
        launch: launch the kernels on every step (False: only on checked steps, as the
            interpreter child does).
        progress: a progress bar over steps.
        clock: the request-path clock (marks the steps that compiled or loaded).
        prime: called once, right before the first step (a zerojit run's :func:`primer_steps`).
        between: called after every step, outside its timing (fallback mode's
            :func:`zerojit.serving.between_requests`: a swap lands between steps, never inside one).
        after_step: ``after_step(step, ms)`` after every timed step (its index and wall
            milliseconds), outside its timing, before ``between`` (:func:`run`'s).
        graphs: ``--cuda-graphs``: a decode step a bucket serves replays its graph
            (:meth:`DecodeGraphs.step`; its time is the replay's, its eager twin is timed apart);
            a checked one is compared with the references too.
    """
    from tqdm.auto import tqdm

    scheduler, allocator = make_scheduler(trace, plan.config, num_blocks=num_blocks, step_interval_s=step_interval_s)
    on_gpu = device.type == "cuda"
    buffers = DecodeBuffers.allocate(plan, device=device)
    to_check = set(check_steps)
    replay = Replay()
    checked, outputs, mismatches, check_s = [], 0, [], 0.0
    bar = tqdm(total=len(trace), desc="replay", unit="req", disable=None if progress else True)
    if not on_gpu:  # a dry step's tensors come from the C allocator (a GPU's from PyTorch's cache)
        serving_allocator()
    with serving_collector(), _CollectorWatch(replay.collections) as watch:
        if prime is not None:
            prime()
        # the clock's compiles from here on are the steps' (the primer's are not the request path's)
        misses0, compile_s0 = (clock.misses, clock.compile_s) if clock is not None else (0, 0.0)
        start = time.perf_counter()
        for batch in scheduler:
            checking = batch.step in to_check
            if launch or checking:
                mark = clock.marker() if clock is not None else None
                watch.step = batch.step
                c0 = time.thread_time()
                t0 = time.perf_counter()
                fill = on_gpu or checking
                blocks = [allocator.blocks(r) for r in batch.request_ids] if fill else None
                bucket = graphs.bucket(batch) if graphs is not None else None
                if bucket is not None:  # replayed (its eager twin runs inside, timed apart)
                    got = graphs.step(batch, bucket, blocks)
                    inputs = (build_step_inputs(batch, plan, blocks=blocks, fill=True, seed=seed, device=device)
                              if checking else None)
                else:
                    inputs = build_step_inputs(batch, plan, blocks=blocks, fill=fill, seed=seed, device=device)
                    step_buffers = DecodeBuffers.allocate(plan, device=device, fill=-7) if checking else buffers
                    got = step_metadata(inputs, plan, KERNELS, step_buffers)
                if on_gpu:
                    torch.cuda.synchronize(device)
                t1 = time.perf_counter()
                replay.step_cpu_ms.append((time.thread_time() - c0) * 1e3)
                watch.step = None
                replay.step_ms.append(graphs.report.graph_step_ms[-1] if bucket is not None else (t1 - t0) * 1e3)
                replay.timed_steps.append(batch.step)
                if mark is not None and clock.marker() != mark:
                    replay.cold.append(len(replay.step_ms) - 1)
                if checking:
                    t1 = time.perf_counter()
                    want = step_metadata(inputs, plan, REFERENCES, DecodeBuffers.allocate(plan, device=device, fill=-7))
                    checked.append(batch.step)
                    outputs += len(want)
                    if bucket is not None:  # the graph's live rows (K3: its buffers' first rows)
                        want = live_rows(want, inputs.num_tokens)
                    mismatches += [f"step {batch.step}: {m}" for m in compare_metadata(got, want)]
                    check_s += time.perf_counter() - t1
                if after_step is not None:
                    after_step(batch.step, replay.step_ms[-1])
            replay.steps += 1
            replay.tokens += batch.num_tokens
            replay.decode_tokens += batch.num_decode_tokens
            replay.prefill_tokens += batch.num_prefill_tokens
            replay.preemptions += len(batch.preempted)
            replay.step_tokens.append(batch.num_tokens)
            replay.step_prefills.append(batch.num_prefills)
            replay.step_decodes.append(batch.num_decodes)
            if batch.finished:
                bar.update(len(batch.finished))
            if between is not None:
                between()
        replay.seconds = time.perf_counter() - start
    bar.close()
    if clock is not None:
        replay.compiles, replay.compile_ms = clock.misses - misses0, (clock.compile_s - compile_s0) * 1e3
        replay.loads = clock.loads
    if to_check:
        where = "cuda" if on_gpu else "interpreter"
        replay.checks = CheckReport(where, tuple(checked), outputs, tuple(mismatches), check_s)
    return replay


#: Rounds of the primer's batches. CPython 3.11 specializes a function's bytecode only after it
#: ran 8 times (``QUICKENING_WARMUP_DELAY``), and a step's Python runs slower until then: on the
#: 2-core CI machine the trace's first step took 0.38-0.46 ms after one round, 0.26-0.27 ms after
#: eight, and 0.24-0.35 ms when the same steps were replayed a second time in the process.
PRIMER_ROUNDS = 8


def primer_batches(config: ModelConfig) -> tuple[Batch, ...]:
    """The primer's batches: one of each kind of step a replay runs, so that every code path of
    the step (and every kernel the plan launches) is primed.

    - a decode-only step (one decode of ``query_len`` tokens: K3's uniform decode when the
      backend flattens drafts, K1's decode flavour, K6's draft rows);
    - a prefill-only step (one prompt of up to 512 tokens, its ``seq_lens`` view 16-byte
      aligned for K4, as a trace's first step is);
    - a mixed step (one decode, then a continuing prefill: K4's unaligned ``seq_lens`` view);
    - the largest steps the scheduler can build: a prefill of ``max_num_batched_tokens`` tokens and
      ``max_num_seqs`` decodes (as many as the token budget allows). PyTorch picks its CUDA
      kernels by size (a sort, a scan or a top-k draw of 8,192 rows is not the kernel of 512 rows)
      and loads each lazily at first use; on the H200 a first 374-token step built its inputs in
      23-31 ms after a 2-token primer, against 1.5 ms later. These steps load them, and leave the
      caching allocator holding the blocks of the largest step, as serving engines' profile run
      does.

    Block ids (``primer_blocks``) are the first ones after the null block.
    """
    lq = config.query_len
    prompt = max(1, min(512, config.max_num_batched_tokens, config.max_model_len - 1))
    largest = max(1, min(config.max_num_batched_tokens, config.max_model_len - 1))
    decodes = max(1, min(config.max_num_seqs, config.max_num_batched_tokens // lq))
    return (
        Batch(step=-1, request_ids=(0,), query_lens=(lq,), seq_lens=(lq + 3,), num_decodes=1),
        Batch(step=-1, request_ids=(0,), query_lens=(prompt,), seq_lens=(prompt,), num_decodes=0),
        Batch(step=-1, request_ids=(0, 1), query_lens=(lq, 2), seq_lens=(lq + 3, 4), num_decodes=1),
        Batch(step=-1, request_ids=(0,), query_lens=(largest,), seq_lens=(largest,), num_decodes=0),
        Batch(step=-1, request_ids=tuple(range(decodes)), query_lens=(lq,) * decodes, seq_lens=(lq + 3,) * decodes,
              num_decodes=decodes),
    )


def _primer_blocks(batch: Batch, plan: MetadataPlan) -> list[list[int]]:
    """Distinct block ids for each request of a primer batch, from block 1 on (0 is the null block)."""
    per_block = plan.config.block_size * plan.config.dcp_size
    out, next_id = [], 1
    for seq in batch.seq_lens:
        n = -(-seq // per_block)
        out.append(list(range(next_id, next_id + n)))
        next_id += n
    return out


def primer_steps(plan: MetadataPlan, device: torch.device, seed: int, report: WarmupReport, *,
                 rounds: int = PRIMER_ROUNDS) -> int:
    """Run :func:`primer_batches` ``rounds`` times through the whole step path (inputs built as
    the replay builds them, every kernel of the step launched) after warm-up, as the start-up's
    last act before the first request, as serving engines run dummy batches at start-up: the
    first-use costs of the step's Python (CPython specializes a function's bytecode after 8
    calls), of the CPU's caches after start-up's last full collection, of PyTorch's lazily
    loaded CUDA kernels and of the allocator's first blocks land here, not on the first requests.

    Runs under a :class:`~zerojit.monitor.JitMonitor` in error mode whatever the run's mode: a
    primer proves coverage, it never compiles what the warm-up missed (a key it would need raises
    :class:`~zerojit.monitor.RuntimeJitError` before compiling). Returns the steps it ran.
    """
    fill = device.type == "cuda"  # as the replay builds its steps (values only where they run)
    batches = [(b, _primer_blocks(b, plan) if fill else None) for b in primer_batches(plan.config)]
    buffers = DecodeBuffers.allocate(plan, device=device)
    with JitMonitor("error", report=report):
        for _ in range(rounds):
            for batch, blocks in batches:
                inputs = build_step_inputs(batch, plan, blocks=blocks, fill=fill, seed=seed, device=device)
                step_metadata(inputs, plan, KERNELS, buffers)
        if fill:
            torch.cuda.synchronize(device)
    return rounds * len(batches)


#: Generation-0 threshold of Python's collector while serving (CPython's default: 700). A step
#: allocates thousands of short-lived objects; at the default a young collection runs every few
#: steps and, now and then, a full one walks the whole heap (116 ms seen on a long CPU run).
SERVING_GC_THRESHOLD = 50_000


@contextlib.contextmanager
def serving_collector() -> Iterator[None]:
    """Python's garbage collector tuned for the serving loop, as serving engines do after
    start-up: everything start-up built (modules, compiled kernels, the model, the cache) is
    collected once and frozen (``gc.freeze()``: moved to a generation no collection walks), and
    young collections run every :data:`SERVING_GC_THRESHOLD` allocations instead of 700. The
    previous thresholds are restored and the frozen objects unfrozen on exit."""
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(SERVING_GC_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


#: ``M_MMAP_THRESHOLD`` and ``M_TRIM_THRESHOLD`` of glibc's malloc while serving on CPU, in bytes.
#: glibc serves a block of at least the mmap threshold (128 KiB at start, raised as large blocks
#: are freed, to 32 MiB at most) with a fresh ``mmap`` and unmaps it when it is freed. A dry
#: step's ``[tokens, index_topk]`` tensors are such blocks (a 64-token step already is; an 8,192
#: token step's are 32 MiB and more), allocated and freed every step: on the 2-core CI machine
#: the steps around an 8,192-token prefill ran 1.1-1.2x slower that way when it was quiet
#: (0.27-0.29 ms against 0.23-0.24 ms with this threshold), 1.4-2.8x while other jobs loaded it
#: (``benchmarks/step_pauses.py --window 2493-2497``).
SERVING_MALLOC_THRESHOLD = 1 << 30

_MALLOPT = {"M_TRIM_THRESHOLD": -1, "M_MMAP_THRESHOLD": -3}  # glibc's <malloc.h> parameter numbers


def serving_allocator() -> bool:
    """Keep a CPU serving loop's large tensors in the C heap, as PyTorch's caching allocator keeps
    a GPU's: glibc's mmap and trim thresholds set to :data:`SERVING_MALLOC_THRESHOLD` (blocks up
    to that size are reused from the heap, and the heap is not given back to the system below
    it), so a step's big tensors cost no ``mmap``/``munmap`` pair each.

    For the rest of the process: glibc has no call that brings its dynamic thresholds back.
    Returns True when set, False where the C library is not glibc (nothing changed).
    """
    import ctypes
    import platform

    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return all(mallopt(_MALLOPT[name], SERVING_MALLOC_THRESHOLD) == 1 for name in ("M_MMAP_THRESHOLD", "M_TRIM_THRESHOLD"))


def _warm_host_ops(plan: MetadataPlan, device: torch.device, seed: int) -> None:
    """Build the primer batches' inputs (no kernel launched) before the replay: PyTorch loads its
    own CUDA kernels lazily at their first use, a cost that is not Triton's and would otherwise
    land on the first step and blur what the warm-up mode changed."""
    for batch in primer_batches(plan.config):
        build_step_inputs(batch, plan, blocks=_primer_blocks(batch, plan), fill=True, seed=seed, device=device)
    torch.cuda.synchronize(device)


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------


#: The ``--check`` child's deadline (:func:`check_deadline_s`): its start-up, plus each checked
#: step (one interprets in about 2 s on the 2-core CI machine), plus its pass over the schedule
#: (which launches nothing: faster than the parent's replay). Generous: it only stops a child
#: that hangs (or a check far too large), which would otherwise wait forever.
CHECK_CHILD_BASE_S = 300.0
CHECK_CHILD_PER_STEP_S = 60.0
CHECK_CHILD_PER_REPLAY_S = 10.0


def check_deadline_s(steps: int, replay_s: float) -> float:
    """Seconds the ``--check`` child may run: checking ``steps`` steps of a schedule whose replay
    took ``replay_s`` seconds here."""
    return CHECK_CHILD_BASE_S + CHECK_CHILD_PER_STEP_S * steps + CHECK_CHILD_PER_REPLAY_S * replay_s


def choose_check_steps(summaries: Sequence[StepSummary], n: int, seed: int, *,
                       max_tokens: int | None = None) -> tuple[int, ...]:
    """``n`` steps to check, drawn with ``seed``: alternately steps with prefills (K4, K5, K7
    run) and decode-only steps, among steps of at most ``max_tokens`` tokens (None: any)."""
    pool = [s for s in summaries if max_tokens is None or s.num_tokens <= max_tokens]
    rng = random.Random(seed)
    groups = [[s.step for s in pool if s.num_prefills], [s.step for s in pool if not s.num_prefills]]
    for g in groups:
        rng.shuffle(g)
    chosen: list[int] = []
    while len(chosen) < n and any(groups):
        for g in groups:
            if g and len(chosen) < n:
                chosen.append(g.pop())
    return tuple(sorted(chosen))


def _cuda_check_steps(trace: Trace, config: ModelConfig, options: RunOptions, device: torch.device) -> tuple[int, ...]:
    """On cuda, the steps to check, from a pass of the (deterministic) scheduler alone."""
    n = options.checks_for(device)
    if device.type != "cuda" or n == 0:
        return ()
    scheduler, _ = make_scheduler(trace, config, num_blocks=kv_blocks_per_rank(config, options.kv_cache_tokens),
                                  step_interval_s=options.step_interval_s)
    summaries = [StepSummary.of(b) for b in scheduler]
    return choose_check_steps(summaries, n, options.seed)


def check_in_interpreter(options: RunOptions, steps: Sequence[int], *, timeout_s: float | None = None) -> CheckReport:
    """Replay the same seeded schedule in a ``TRITON_INTERPRET=1`` child process and compare the
    kernels with the references on ``steps`` (the child neither warms up nor compiles).
    ``timeout_s``: the child's deadline (None: :func:`check_deadline_s` of ``steps`` alone);
    past it the child is killed.

    Raises:
        RunError: the interpreter cannot run here (it needs numpy), the child failed, or it ran
            past its deadline.
    """
    import importlib.util

    if importlib.util.find_spec("numpy") is None:
        raise RunError("--check runs the kernels in Triton's interpreter, which needs numpy: "
                       "`pip install numpy`, or run without --check")
    src_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, TRITON_INTERPRET="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src_root, env.get("PYTHONPATH")) if p)
    env.pop(JIT_MONITOR_ENV, None)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="zerojit-check-") as tmp:
        spec, result = os.path.join(tmp, "spec.json"), os.path.join(tmp, "result.json")
        Path(spec).write_text(json.dumps({"options": dataclasses.asdict(options), "steps": list(steps)}))
        code = "from zerojit.runner.engine import _interpreter_child; _interpreter_child()"
        if timeout_s is None:
            timeout_s = check_deadline_s(len(steps), 0.0)
        try:  # (subprocess.run kills the child at the deadline)
            proc = subprocess.run([sys.executable, "-c", code, spec, result], env=env, capture_output=True, text=True,
                                  timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise RunError(f"the --check child process (TRITON_INTERPRET=1, checking {count(len(steps), 'step')}) "
                           f"did not finish within its deadline of {timeout_s:g} s and was killed: check fewer steps "
                           "(--check) or fewer requests (--requests)") from None
        if proc.returncode != 0 or not os.path.exists(result):
            raise RunError(f"the --check child process (TRITON_INTERPRET=1) failed with status {proc.returncode}:\n"
                           f"{proc.stderr[-4000:]}")
        data = json.loads(Path(result).read_text())
    return CheckReport("interpreter", tuple(data["steps"]), data["outputs"], tuple(data["mismatches"]),
                       time.perf_counter() - start)


def _interpreter_child() -> None:
    """The ``--check`` child: replay the schedule, interpret and compare the given steps."""
    spec_path, result_path = sys.argv[1], sys.argv[2]
    if not triton_compat.interpreting():
        raise SystemExit("the --check child must run with TRITON_INTERPRET=1")
    spec = json.loads(Path(spec_path).read_text())
    options = RunOptions(**spec["options"])
    config = load_config(options.config, **options.config_overrides)
    trace = load_trace(options.trace_path, limit=options.requests, max_model_len=config.max_model_len)
    num_blocks = kv_blocks_per_rank(config, options.kv_cache_tokens)
    model = SparseMLAModel(config, options.backend)  # no registry is active: registers nothing
    cache = allocate_kv_cache(config, num_blocks * config.dcp_size, device="cpu")
    plan = MetadataPlan.for_cache(config, model.backend, cache)
    replay = replay_trace(trace, plan, num_blocks=num_blocks, device=torch.device("cpu"), seed=options.seed,
                          step_interval_s=options.step_interval_s, check_steps=spec["steps"], launch=False)
    checks = replay.checks or CheckReport("interpreter", (), 0, (), 0.0)
    Path(result_path).write_text(json.dumps({"steps": list(checks.steps), "outputs": checks.outputs,
                                             "mismatches": list(checks.mismatches)}))
