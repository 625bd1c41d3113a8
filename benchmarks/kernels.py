"""Kernel speed: the seven sparse-MLA kernels against PyTorch and a device copy, on a GPU.

For each kernel K1-K7 of docs KERNELS.md, at serving sizes, one run measures:

* the Triton kernel, launched through its zerojit launcher after a zerojit warm-up (every key
  compiled and loaded first; a :class:`~zerojit.monitor.JitMonitor` in ``error`` mode is active
  while the kernels run, so a runtime compile would fail the case instead of being timed);
* its PyTorch reference (:mod:`zerojit.kernels.mla.reference`) in eager mode;
* the same reference under ``torch.compile`` (default options; one compiled function per
  kernel, reused across its sizes). Compiling runs in a child process with a wall-clock cap
  (``--compile-budget``): sizes it does not reach report ``n/a`` with the reason, as does a
  reference that torch.compile cannot handle;
* ``dst.copy_(src)`` of int32 tensors moving the same number of bytes (read + write) as the
  kernel: the achievable-bandwidth yardstick of the same run.

Timing, two figures per Triton case and per copy, both **medians** with the **L2 flushed** before
every call (a 256 MB buffer zeroed; the flush is outside the timed region):

* ``Triton µs`` / ``copy µs`` (JSON ``triton_us`` / ``copy_us``): ``triton.testing.do_bench``,
  CUDA events around each call. Each timed call is the whole launch entry a server makes (the
  zerojit launcher with its output allocation; the reference function). do_bench does not sync
  between calls, so the host's time stays hidden only while the GPU has queued work: it is inside
  the events whenever the GPU waits for the host, between an entry's GPU ops (an output made by
  ``torch.zeros``/``torch.full`` is a fill kernel, then the Triton kernel) or before its first
  one (a host that takes longer to issue the call than the GPU takes to flush the L2). On a
  contended host this figure measures the host: K4-K6 read 15-35 us on one H200 run, 6-7 us on a
  quiet host, the copy unmoved. A reference that synchronises with the host (``int(tensor)``)
  includes its stalls; the reference columns (``eager``, ``compiled``) are this figure only.
* ``graph µs`` / ``copy graph µs`` (``triton_graph_us`` / ``copy_graph_us``): the same Triton
  call, and the copy, captured into a CUDA graph (``torch.cuda.CUDAGraph``, warmed once on a side
  stream first; the launcher's output allocation comes from the graph's private pool) and the
  replay timed by :class:`GraphTimer`: CUDA events around ``graph.replay()`` only, median over
  replays, no host sync between them: the GPU's time alone (the host only has to stay ahead of
  the flushes, a few us of work per replay against >= 55 us of GPU work). A case whose
  capture or replay fails (a call that synchronises with the host cannot be captured) shows
  ``n/a`` and the reason (``graph_na``); without CUDA the column is ``n/a`` ("no CUDA").

The copy goals below use the graph figures (JSON ``goal_basis``: ``graph``), falling back to the
do_bench figures for a case without them (``do_bench``, said in the table notes and goal lines):
the goal is about the kernels' GPU speed, and a host slower than the GPU must not decide it. That
is the choice made here; the do_bench figures stay printed beside them (the every-size goal line
also counts how many sizes meet it on those), and the speed-ups over the references use them.

Exactness: each Triton output is compared once per size with the eager reference, exactly
(``torch.equal``); so is the graph's: its captured outputs are filled with
:data:`POISON`, the graph replayed once, and the outputs it wrote compared (an element the replay
did not write differs). A difference is printed loudly and makes the run exit with status 1. The
compiled reference's output is checked against the eager one the same way. The JitMonitor in
``error`` mode covers the captures too (they launch through zerojit; a replay never enters Python).

Sizes (steps built from the shipped Azure trace, :data:`zerojit.runner.trace.DEFAULT_TRACE`):

* ``decode R=n``: the n requests of the trace with the longest contexts, each at its last decode
  step (context = prompt + output - 1 tokens, query ``Lq = 1 + num_speculative_tokens``);
  n = 64 and ``max_num_seqs`` = 256 (decode-heavy: many requests x 1-2 tokens, long contexts).
* ``prefill R=n T=t``: the longest prompts of the trace, longest first, each prefilled as one chunk,
  the last one cut so the step has exactly t tokens (a first chunk of a chunked prefill); t =
  1,024 and ``max_num_batched_tokens`` = 8,192 (prefill-heavy: a few long chunks).

Block ids are a seeded random permutation of the cache's blocks (a fragmented cache); the
indexer's top-k positions are drawn by :func:`zerojit.runner.metadata.build_step_inputs`
(seeded); the KV cache's strides are those of the runner's packed cache. Kernels, flavours and
configs (``deepseek-v3.2``: block 64, top-k 2,048; K3 needs speculative decoding, so it runs
on ``dsv4-like``: one MTP token, block 256):

====  =====================================  =============================  ================
K1    convert_req_index_to_global_index      decode: count_valid            decode, prefill
                                             prefill: workspace_count_valid
K2    compressed_slot_mapping                ratio 4                        decode, prefill
K3    prepare_uniform_decode                 Lq = 2 (dsv4-like)             decode
K4    build_prefill_chunk_metadata           ratio 4                        prefill
K5    compute_prefill_metadata               -                              prefill
K6    compute_swa_indices_and_lens           causal, Wn = 128               decode, prefill
K7    combine_topk_swa_indices               ratio 4, TOP_K 2,048           prefill
====  =====================================  =============================  ================

Bytes each kernel must move (int32 = 4 bytes unless said; "distinct entries" are block-table
entries some output actually needs, counted once; re-reads that a cache serves are not counted):

* K1: read ``token_indices`` T*K (every entry is inspected), ``req_id`` T, the distinct
  block-table entries of the valid non-workspace entries, workspace ids T and the distinct
  workspace starts used (prefill flavour); write ``out`` T*K and ``valid_counts`` T.
* K2: read ``query_start_loc`` R+1, ``seq_lens`` R, the distinct block-table entries of the
  step's compressed entries; write ``slot_mapping`` T (int64, 8 bytes).
* K3: read ``seq_lens`` and the whole block-table rows (W columns) of the decodes; write
  ``expanded_seq_lens`` Nd and ``expanded_block_table`` Nd*W.
* K4: read ``query_start_loc`` n+1, ``seq_lens`` n, ``cu_compressed`` n+1; write ``ks`` and
  ``ke`` (one per query row) and ``token_to_seq`` (one per compressed entry).
* K5: read ``seq_lens`` and ``query_start_loc`` of the prefills; write ``gather_lens`` and
  ``cu_gather_lens``.
* K6: read ``token_to_req`` T, ``slot_mapping`` T (int64), ``seq_lens`` R,
  ``query_start_loc`` R+1, the distinct window block-table entries; write ``swa_indices``
  T*Wout and ``swa_lens`` T.
* K7: read the top-k entries the rule uses (``k < tk`` per token), ``query_start_loc``,
  ``seq_lens`` and ``gather_lens`` of the chunk; write ``combined`` T*roundup(TOP_K+Wn, 128)
  and ``lens`` T.

Achieved bandwidth = those bytes / the kernel's time; "% copy" = the copy's time / the kernel's
time (the copy moves the same bytes), from the do_bench figures; "% copy graph" the same from the
graph figures. Goals checked at the end (PASS/FAIL): every size of every kernel at >= 50 % of the
copy or launch-bound (<= 8 us), on the goal's basis above (a size below both is timed a second
time on that basis and the faster median kept, both printed; the do_bench figure gets the same
second try); at each kernel's largest size, >= 10x faster than the eager reference and no slower
than the compiled one (do_bench figures); K1 at T = 8,192 at >= 85 % of the copy's bandwidth (the
goal's basis); every output exact, launched and graph-replayed; no runtime compile.

Usage (GPU)::

    PYTHONPATH=src python3 benchmarks/kernels.py --json OUT.json   # all sizes, ~3-4 min on an H200
    PYTHONPATH=src python3 benchmarks/kernels.py --quick          # goal sizes only, ~2 min

torch.compile gets ``--compile-budget`` seconds (120; 60 with ``--quick``): each kernel's largest
size is compiled first, later sizes are skipped once the budget is spent, and the child is
killed at budget + 60 s whatever it is doing. The exit status is 1 when an output differs from
its reference or a case raised; goals that FAIL are reported, not turned into a status.

Without a GPU, ``--device cpu --dry`` builds every input on the CPU, runs the references and
prints the byte counts (no timings), then warms the kernels for ``cuda:90`` under
:func:`zerojit.compile_only.compile_only` and dry-launches each case with the monitor in error
mode (``--no-dry-launch`` skips that): the GPU run will hit only warmed keys. With
``TRITON_INTERPRET=1``, ``--device cpu`` without ``--dry`` runs the whole pipeline on the CPU
(interpreted kernels, exactness checked, the compile child included) as a plumbing check whose
times mean nothing (slow: minutes per large size).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import platform
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

try:
    import zerojit  # noqa: F401
except ImportError:  # run from a source tree without PYTHONPATH=src
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch

from zerojit.kernels.mla import reference
from zerojit.kernels.mla.backends import KERNEL_NAMES, default_backend
from zerojit.kernels.mla.combine import combine_topk_swa_indices
from zerojit.kernels.mla.config import INDEXER_RATIO, ModelConfig
from zerojit.kernels.mla.decode import prepare_uniform_decode
from zerojit.kernels.mla.index import FLAVOUR_INPUTS, convert_req_index_to_global_index
from zerojit.kernels.mla.prefill import build_prefill_chunk_metadata, compute_prefill_metadata
from zerojit.kernels.mla.shapes import cdiv, padded_width, swa_width
from zerojit.kernels.mla.slot_mapping import compressed_slot_mapping
from zerojit.kernels.mla.swa import compute_swa_indices_and_lens
from zerojit.outputs import output_problem, write_output
from zerojit.runner.config import load_config
from zerojit.runner.kv_cache import allocate_kv_cache
from zerojit.runner.metadata import DecodeBuffers, MetadataPlan, StepInputs, build_step_inputs
from zerojit.runner.scheduler import Batch
from zerojit.runner.trace import DEFAULT_TRACE, Trace, load_trace

I32, I64 = torch.int32, torch.int64
KERNELS = tuple(KERNEL_NAMES)  # "K1" .. "K7"
MAIN_CONFIG = "deepseek-v3.2"  # K1, K2, K4-K7
SPEC_CONFIG = "dsv4-like"  # K3 (needs num_speculative_tokens > 0)
KV_CACHE_TOKENS = 1 << 20  # the runner's default cache size (more blocks if a step needs them)
RESULT_TAG = "ZJ-RESULT "  # child -> parent: one JSON result per line
LOG_TAG = "ZJ-LOG "  # child -> parent: a progress line to print
WARMUP_WORKERS = min(8, os.cpu_count() or 1)  # zerojit warm-up compile workers
HARD_CAP_SLACK_S = 60.0  # the compile child is killed at budget + this (start-up, last compile and timing)

# Goals of the issue.
EAGER_SPEEDUP_GOAL = 10.0
COMPILED_SPEEDUP_GOAL = 1.0
K1_COPY_FRACTION_GOAL = 0.85
COPY_FRACTION_GOAL = 0.5  # every size: at least half the copy's bandwidth ...
LAUNCH_BOUND_US = 8.0  # ... or a launch-bound time (a launch's floor on an H200 is ~5 us)
K1_GOAL_TOKENS = 8192


# ---------------------------------------------------------------------------------------------
# Steps from the trace
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """One step of a config: the batch, each request's main block ids, its label."""

    label: str  # "decode R=256 T=256" / "prefill R=2 T=8192"
    kind: str  # "decode" | "prefill"
    batch: Batch
    blocks: tuple[tuple[int, ...], ...]

    @property
    def tokens(self) -> int:
        return self.batch.num_tokens


def decode_batch(trace: Trace, config: ModelConfig, num_reqs: int) -> Batch:
    """The ``num_reqs`` requests of ``trace`` with the longest contexts, each at its last decode."""
    lq = config.query_len
    reqs = sorted(trace, key=lambda r: (-r.total_len, r.request_id))[:num_reqs]
    seq = tuple(max(r.total_len - 1, lq) for r in reqs)
    return Batch(step=0, request_ids=tuple(r.request_id for r in reqs), query_lens=(lq,) * len(reqs),
                 seq_lens=seq, num_decodes=len(reqs))


def prefill_batch(trace: Trace, num_tokens: int) -> Batch:
    """The longest prompts of ``trace``, one chunk each, the last cut to ``num_tokens`` in all."""
    ids, qlens, left = [], [], num_tokens
    for r in sorted(trace, key=lambda r: (-r.prompt_len, r.request_id)):
        take = min(r.prompt_len, left)
        ids.append(r.request_id)
        qlens.append(take)
        left -= take
        if left == 0:
            break
    return Batch(step=0, request_ids=tuple(ids), query_lens=tuple(qlens), seq_lens=tuple(qlens), num_decodes=0)


def assign_blocks(batch: Batch, config: ModelConfig, num_blocks: int, seed: int) -> tuple[tuple[int, ...], ...]:
    """Each request's main block ids: consecutive pieces of a seeded permutation of ``1..num_blocks-1``."""
    per_block = config.block_size * config.dcp_size
    g = torch.Generator().manual_seed(seed)
    perm = (torch.randperm(num_blocks - 1, generator=g) + 1).tolist()
    out, at = [], 0
    for s in batch.seq_lens:
        n = cdiv(s, per_block)
        out.append(tuple(perm[at: at + n]))
        at += n
    return tuple(out)


def blocks_needed(batch: Batch, config: ModelConfig) -> int:
    per_block = config.block_size * config.dcp_size
    return sum(cdiv(s, per_block) for s in batch.seq_lens)


# ---------------------------------------------------------------------------------------------
# One benchmark case: a kernel at a size
# ---------------------------------------------------------------------------------------------


@dataclass
class Case:
    """A kernel at one size: how to launch it, its reference, and the bytes it must move."""

    kernel: str  # "K1"
    size: str  # the scenario label, "prefill R=2 T=8192"
    kind: str  # "decode" | "prefill"
    tokens: int
    config: str
    variant: str
    run_triton: Callable[[], Any]
    ref_fn: Callable[..., Any]
    ref_kwargs: dict[str, Any]
    bytes_read: int
    bytes_written: int
    largest: bool = False
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.kernel} {self.size}"

    @property
    def name(self) -> str:
        return KERNEL_NAMES[self.kernel]

    @property
    def nbytes(self) -> int:
        return self.bytes_read + self.bytes_written

    def run_eager(self) -> Any:
        return self.ref_fn(**self.ref_kwargs)


def _tensors(out: Any) -> list[torch.Tensor]:
    """The tensors of a kernel's or reference's return value, in order (None skipped)."""
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for t in out if t is not None]


def snapshot(out: Any) -> list[torch.Tensor]:
    """A copy of the outputs (K3 writes into buffers that later calls overwrite)."""
    return [t.clone() for t in _tensors(out)]


def differences(got: list[torch.Tensor], want: list[torch.Tensor]) -> list[str]:
    """Every output that is not exactly equal, one line each (empty: equal)."""
    if len(got) != len(want):
        return [f"{len(got)} outputs vs {len(want)}"]
    problems = []
    for i, (a, b) in enumerate(zip(got, want)):
        if a.shape != b.shape or a.dtype != b.dtype:
            problems.append(f"output {i}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}")
            continue
        if not torch.equal(a, b):
            where = (a != b).nonzero()
            first = tuple(int(x) for x in where[0])
            problems.append(f"output {i}: {where.shape[0]} element(s) differ, first at {first}: "
                            f"{int(a[first])} vs {int(b[first])}")
    return problems


def _distinct(keys: torch.Tensor) -> int:
    return int(torch.unique(keys).numel())


class CaseBuilder:
    """Builds the cases of one config: its plan (strides of the runner's packed cache) and steps."""

    def __init__(self, config: ModelConfig, trace: Trace, scenarios: list[tuple[str, str, Batch]], *,
                 device: torch.device, seed: int) -> None:
        self.config = config
        self.backend = default_backend(config)
        self.device = device
        self.seed = seed
        need = max((blocks_needed(b, config) for _, _, b in scenarios), default=0)
        per_block = config.block_size * config.dcp_size
        self.num_blocks = max(cdiv(KV_CACHE_TOKENS, per_block), need + 1)
        self.scenarios = [
            Scenario(label, kind, batch, assign_blocks(batch, config, self.num_blocks, seed + i))
            for i, (label, kind, batch) in enumerate(scenarios)
        ]
        self.cache = None
        self.plan: MetadataPlan | None = None

    def bind(self, cache) -> None:
        self.cache = cache
        self.plan = MetadataPlan.for_cache(self.config, self.backend, cache)

    def inputs(self, sc: Scenario) -> StepInputs:
        return build_step_inputs(sc.batch, self.plan, blocks=[list(b) for b in sc.blocks], fill=True,
                                 seed=self.seed, device=self.device)

    # -- K1 ------------------------------------------------------------------------------------
    def k1(self, sc: Scenario, x: StepInputs) -> Case:
        cfg, plan = self.config, self.plan
        decode_flavour, prefill_flavour = plan.index_flavours
        flavour = decode_flavour if sc.kind == "decode" else prefill_flavour
        spec = FLAVOUR_INPUTS[flavour]
        T, K = x.num_tokens, cfg.index_topk
        kw = dict(req_id=x.token_to_req, block_table=x.block_table, token_indices=x.token_indices,
                  block_size=cfg.block_size, block_stride_rows=plan.block_stride_rows,
                  max_num_blocks_per_req=plan.table_width, count_valid=spec["count_valid"], compact=spec["compact"])
        read = 4 * T * K + 4 * T  # token_indices, req_id
        tok = x.token_indices.to(I64)
        valid = (tok >= 0) & (tok // cfg.block_size < plan.table_width)
        if spec["has_workspace"]:
            # the whole step is one prefill chunk; its workspace starts are the exclusive cumsum
            # of the contexts (as the runner's), every row reads through the workspace
            n = x.num_reqs
            qlens = torch.tensor(x.query_lens, dtype=I64, device=self.device)
            ids = torch.repeat_interleave(torch.arange(n, device=self.device), qlens).to(I32)
            starts, acc = [], 0
            for s in x.seq_lens_host:
                starts.append(acc)
                acc += s
            kw.update(prefill_workspace_request_ids=ids,
                      prefill_workspace_starts=torch.tensor(starts, dtype=I32, device=self.device))
            read += 4 * T + 4 * _distinct(ids)
            from_table = valid & (ids.to(I64) < 0).unsqueeze(1)
        else:
            from_table = valid
        rows = x.token_to_req.to(I64).unsqueeze(1).expand_as(tok)
        read += 4 * _distinct((rows * plan.table_width + tok // cfg.block_size)[from_table])
        written = 4 * T * K + (4 * T if spec["count_valid"] else 0)
        return self._case("K1", sc, flavour, convert_req_index_to_global_index, reference.convert_req_index_to_global_index,
                          kw, {}, read, written)

    # -- K2 ------------------------------------------------------------------------------------
    def k2(self, sc: Scenario, x: StepInputs, ratio: int = INDEXER_RATIO) -> Case:
        cfg = self.config
        stride = dict(self.plan.compressed_block_strides)[ratio]
        cbs = cfg.block_size // ratio
        kw = dict(query_start_loc=x.query_start_loc, seq_lens=x.seq_lens, block_table=x.block_table,
                  num_tokens=x.num_tokens, ratio=ratio, block_size=cfg.block_size, block_stride_rows=stride,
                  **self.plan.dcp)
        entries = 0  # distinct block-table entries of the step's compressed entries (S = 1)
        for q, s in zip(x.query_lens, x.seq_lens_host):
            lo = cdiv(s - q + 1, ratio) - 1  # first entry e = pos // c with (pos + 1) % c == 0
            hi = s // ratio - 1
            if hi >= lo:
                entries += hi // cbs - lo // cbs + 1
        R = x.num_reqs
        read = 4 * (R + 1) + 4 * R + 4 * entries
        written = 8 * x.num_tokens
        return self._case("K2", sc, f"ratio {ratio}", compressed_slot_mapping, reference.compressed_slot_mapping,
                          kw, {}, read, written)

    # -- K3 ------------------------------------------------------------------------------------
    def k3(self, sc: Scenario, x: StepInputs) -> Case:
        plan, nd = self.plan, x.num_decodes
        lq = x.query_lens[0]
        mine = DecodeBuffers.allocate(plan, device=self.device, fill=-7)
        theirs = DecodeBuffers.allocate(plan, device=self.device, fill=-7)
        base = dict(seq_lens=x.seq_lens[:nd], block_table=x.block_table[:nd], query_len=lq, num_decode_tokens=nd * lq)
        W = x.block_table.shape[1]
        Nd = nd * lq
        read = 4 * nd + 4 * nd * W
        written = 4 * Nd + 4 * Nd * W
        ref_kw = dict(base, expanded_seq_lens=theirs.expanded_seq_lens, expanded_block_table=theirs.expanded_block_table)
        kern_kw = dict(base, expanded_seq_lens=mine.expanded_seq_lens, expanded_block_table=mine.expanded_block_table)
        return Case("K3", sc.label, sc.kind, sc.tokens, self.config.name, f"Lq {lq}",
                    lambda: prepare_uniform_decode(**kern_kw), reference.prepare_uniform_decode, ref_kw, read, written)

    # -- K4 ------------------------------------------------------------------------------------
    def k4(self, sc: Scenario, x: StepInputs, ratio: int = INDEXER_RATIO) -> Case:
        n, T = x.num_reqs, x.num_tokens
        counts = [self.plan.compressed_len(s, ratio) for s in x.seq_lens_host]
        cu = [0]
        for c in counts:
            cu.append(cu[-1] + c)
        kw = dict(query_start_loc=x.query_start_loc, seq_lens=x.seq_lens[:n],
                  cu_compressed=torch.tensor(cu, dtype=I32, device=self.device), query_slice_start=0,
                  query_slice_stop=T, num_compressed=cu[-1], ratio=ratio, **self.plan.dcp)
        read = 4 * ((n + 1) + n + (n + 1))
        written = 4 * 2 * T + 4 * cu[-1]
        return self._case("K4", sc, f"ratio {ratio}", build_prefill_chunk_metadata, reference.build_prefill_chunk_metadata,
                          kw, {}, read, written)

    # -- K5 ------------------------------------------------------------------------------------
    def k5(self, sc: Scenario, x: StepInputs) -> Case:
        nd, npf = x.num_decodes, x.num_prefills
        kw = dict(seq_lens=x.seq_lens, query_start_loc=x.query_start_loc, num_decodes=nd, num_prefills=npf,
                  sliding_window=self.config.sliding_window)
        read = 4 * npf + 4 * (npf + 1)
        written = 4 * npf + 4 * (npf + 1)
        return self._case("K5", sc, f"{npf} prefills", compute_prefill_metadata, reference.compute_prefill_metadata,
                          kw, {}, read, written)

    # -- K6 ------------------------------------------------------------------------------------
    def k6(self, sc: Scenario, x: StepInputs) -> Case:
        cfg, T, R = self.config, x.num_tokens, x.num_reqs
        Wn, bs = cfg.sliding_window, cfg.block_size
        kw = dict(token_to_req=x.token_to_req, slot_mapping=x.swa_slot_mapping, seq_lens=x.seq_lens,
                  query_start_loc=x.query_start_loc, block_table=x.swa_block_table, num_tokens=T, token_offset=0,
                  sliding_window=Wn, block_size=bs, block_stride_rows=self.plan.swa_block_stride_rows, causal=True,
                  num_speculative_tokens=cfg.num_speculative_tokens)
        entries = 0  # distinct window blocks per request: positions [first - Wn + 1, last]
        for q, s in zip(x.query_lens, x.seq_lens_host):
            lo, hi = max(s - q - Wn + 1, 0), s - 1
            entries += hi // bs - lo // bs + 1
        wout = swa_width(Wn, True, cfg.num_speculative_tokens)
        read = 4 * T + 8 * T + 4 * R + 4 * (R + 1) + 4 * entries
        written = 4 * T * wout + 4 * T
        return self._case("K6", sc, f"causal Wn {Wn}", compute_swa_indices_and_lens,
                          reference.compute_swa_indices_and_lens, kw, {}, read, written)

    # -- K7 ------------------------------------------------------------------------------------
    def k7(self, sc: Scenario, x: StepInputs, ratio: int = INDEXER_RATIO) -> Case:
        cfg, n, T = self.config, x.num_reqs, x.num_tokens
        Wn, top_k = cfg.sliding_window, cfg.topk_width(ratio)
        ctx = x.seq_lens_host
        gathered = [q + min(s - q, Wn - 1) for q, s in zip(x.query_lens, ctx)]
        gather_lens, _ = reference.compute_prefill_metadata(x.seq_lens, x.query_start_loc, num_decodes=0,
                                                            num_prefills=n, sliding_window=Wn)
        swa_offset = max(s // ratio for s in ctx)
        if ratio == INDEXER_RATIO:
            topk = x.compressed_topk[:T]
        else:  # no indexer: every compressed entry
            topk = torch.arange(top_k, dtype=I32, device=self.device).expand(T, top_k)
        kw = dict(topk=topk, query_start_loc=x.query_start_loc, seq_lens=x.seq_lens[:n], gather_lens=gather_lens,
                  num_tokens=T, row_stride=swa_offset + max(gathered), swa_offset=swa_offset, top_k=top_k,
                  ratio=ratio, sliding_window=Wn)
        hints = dict(max_gather_len=max(gathered), max_compressed_len=swa_offset)
        used = 0  # top-k entries the rule reads: k < tk = min((pos + 1) // c, TOP_K)
        for q, s in zip(x.query_lens, ctx):
            pos1 = torch.arange(s - q + 1, s + 1)
            used += int(torch.clamp(pos1 // ratio, max=top_k).sum())
        read = 4 * used + 4 * ((n + 1) + n + n)
        written = 4 * T * padded_width(top_k, Wn) + 4 * T
        return self._case("K7", sc, f"ratio {ratio} TOP_K {top_k}", combine_topk_swa_indices,
                          reference.combine_topk_swa_indices, kw, hints, read, written)

    def _case(self, k: str, sc: Scenario, variant: str, kernel, ref_fn, kw: dict, hints: dict, read: int,
              written: int) -> Case:
        return Case(k, sc.label, sc.kind, sc.tokens, self.config.name, variant,
                    lambda: kernel(**kw, **hints), ref_fn, kw, read, written)


# Which sizes each kernel runs at (the scenario kinds it serves in a real step).
KERNEL_KINDS = {
    "K1": ("decode", "prefill"),
    "K2": ("decode", "prefill"),
    "K3": ("decode",),
    "K4": ("prefill",),
    "K5": ("prefill",),
    "K6": ("decode", "prefill"),
    "K7": ("prefill",),
}


def scenario_specs(config: ModelConfig, trace: Trace, quick: bool) -> list[tuple[str, str, Batch]]:
    """The config's steps: decode R = 64 and max_num_seqs, prefill T = 1,024 and max_num_batched_tokens."""
    decodes = [64] if quick else [64, config.max_num_seqs]
    prefills = [config.max_num_batched_tokens] if quick else [1024, config.max_num_batched_tokens]
    out = []
    for r in decodes:
        b = decode_batch(trace, config, r)
        out.append((f"decode R={b.num_reqs} T={b.num_tokens}", "decode", b))
    for t in prefills:
        b = prefill_batch(trace, t)
        out.append((f"prefill R={b.num_reqs} T={b.num_tokens}", "prefill", b))
    return out


@dataclass
class Setup:
    """Everything a run builds before timing: configs, caches, registries, cases."""

    builders: dict[str, CaseBuilder]
    cases: list[Case]
    models: dict[str, Any]


def build_cases(kernels: tuple[str, ...], *, device: torch.device, seed: int, quick: bool,
                register: Any = None) -> Setup:
    """Build every case of ``kernels``; ``register(config_name)`` returns a context manager under
    which the model and cache are built (a registry's ``activate()``), or None."""
    configs = {MAIN_CONFIG: [k for k in kernels if k != "K3"], SPEC_CONFIG: [k for k in kernels if k == "K3"]}
    builders, cases, models = {}, [], {}
    from zerojit.runner.model import SparseMLAModel

    for name, ks in configs.items():
        if not ks:
            continue
        config = load_config(name)
        trace = load_trace(DEFAULT_TRACE, max_model_len=config.max_model_len)
        b = CaseBuilder(config, trace, scenario_specs(config, trace, quick), device=device, seed=seed)
        ctx = register(name) if register is not None else contextlib.nullcontext()
        with ctx:  # layers register K3/K4/K5/K7, cache binding K1/K2/K6 (the runner's order)
            model = SparseMLAModel(config, b.backend)
            cache = allocate_kv_cache(config, b.num_blocks, device="meta")  # only its strides matter
            model.bind_kv_cache(cache)
        b.bind(cache)
        builders[name], models[name] = b, model
        for sc in b.scenarios:
            x = b.inputs(sc)
            for k in ks:
                if sc.kind in KERNEL_KINDS[k]:
                    cases.append(getattr(b, k.lower())(sc, x))
    for k in kernels:  # each kernel's largest size: most bytes
        mine = [c for c in cases if c.kernel == k]
        if mine:
            max(mine, key=lambda c: (c.nbytes, c.tokens)).largest = True
    cases.sort(key=lambda c: (KERNELS.index(c.kernel), c.kind != "decode", c.tokens))
    return Setup(builders, cases, models)


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench_us(fn: Callable[[], Any], quick: bool, device: torch.device) -> float:
    """Median microseconds of ``fn`` (do_bench: CUDA events, L2 flushed before every call).

    On a CPU (only the interpreter plumbing check, see ``--device``) a plain wall-clock median
    of a few calls: meaningless as a measurement, it only exercises the code.
    """
    if device.type != "cuda":
        t0 = time.perf_counter()
        fn()
        reps = max(1, min(10, int(0.2 / max(time.perf_counter() - t0, 1e-6))))
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return 1e6 * sorted(times)[len(times) // 2]
    from triton.testing import do_bench

    warmup, rep = (10, 40) if quick else (25, 100)
    return 1e3 * do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


class CopyBaseline:
    """``dst.copy_(src)`` of int32 tensors moving ``nbytes`` (half read, half written)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._bufs: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def elements(self, nbytes: int) -> int:
        return max(1, math.ceil(nbytes / 8))  # 4 bytes read + 4 written per element

    def call(self, nbytes: int) -> Callable[[], torch.Tensor]:
        """The copy itself (its buffers are made once per size and kept)."""
        n = self.elements(nbytes)
        if n not in self._bufs:
            self._bufs[n] = (torch.ones(n, dtype=I32, device=self.device), torch.empty(n, dtype=I32, device=self.device))
        src, dst = self._bufs[n]
        return lambda: dst.copy_(src)

    def time_us(self, nbytes: int, quick: bool) -> tuple[float, int]:
        """Median microseconds of the copy (:func:`bench_us`) and the bytes it moves."""
        return bench_us(self.call(nbytes), quick, self.device), 8 * self.elements(nbytes)


class CaptureError(Exception):
    """A call could not be captured into a CUDA graph; the message is the first cause, one line."""


@dataclass
class Captured:
    """A call captured into a CUDA graph and the tensors that call returned (the graph's outputs:
    every replay writes them again). Both stay alive until :meth:`close`."""

    graph: Any  # torch.cuda.CUDAGraph
    out: Any

    def close(self) -> None:
        self.out = None
        self.graph.reset()


def capture(fn: Callable[[], Any]) -> Captured:
    """Capture one call of ``fn`` into a new CUDA graph (after one warm-up call on a side stream,
    as torch's CUDA-graph docs require); raises :class:`CaptureError` with the first cause.

    Zerojit launches on torch's current stream, which ``torch.cuda.graph`` sets to its capture
    stream; an output the launcher allocates comes from the graph's private memory pool. A call
    that synchronises with the host (``int(tensor)``) cannot be captured.
    """
    caller = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(caller)
    with torch.cuda.stream(side):
        fn()
    caller.wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    cause: BaseException | None = None
    try:
        with torch.cuda.graph(g):
            try:
                out = fn()
            except Exception as e:
                cause = e  # capture_end then reports only that the capture was invalidated
                raise
        torch.cuda.synchronize()
    except Exception as e:
        torch.cuda.set_stream(caller)  # a failing capture_end leaves the capture stream current
        with contextlib.suppress(Exception):
            torch.cuda.synchronize()
        raise CaptureError(_short(cause or e)) from e
    return Captured(g, out)


class GraphTimer:
    """GPU time of a CUDA-graph replay: the median over replays, each with the L2 flushed first.

    Per replay: zero a 256 MiB buffer (more than any GPU's L2; outside the timed region), record
    a start event, ``graph.replay()``, record an end event; no host sync until the last replay.
    Each flush is >= 55 us of GPU work (256 MiB at an H200's 4.8 TB/s) against a few us of host
    work per replay (the same four calls as the copy's do_bench loop), so the host runs ahead,
    further with every warm-up replay, and the GPU does not wait for it between the events: the
    figure is the graph's own GPU time, its kernel(s) and any fill of an output it allocates.
    """

    FLUSH_BYTES = 256 * 2**20
    REPLAYS = (20, 200)  # (untimed, timed) replays per figure
    QUICK_REPLAYS = (10, 50)  # the same with --quick

    def __init__(self, device: torch.device, quick: bool) -> None:
        self.flush = torch.empty(self.FLUSH_BYTES // 4, dtype=I32, device=device)
        self.warmup, self.reps = self.QUICK_REPLAYS if quick else self.REPLAYS

    def replay_us(self, graph: Any) -> float:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        for _ in range(self.warmup):
            self.flush.zero_()
            graph.replay()
        for start, end in zip(starts, ends):
            self.flush.zero_()
            start.record()
            graph.replay()
            end.record()
        torch.cuda.synchronize()
        return 1e3 * statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def measure(case: Case, copy: CopyBaseline, quick: bool, *, second_opinion: bool) -> list[torch.Tensor] | None:
    """Exactness once, then Triton, eager and copy times (:func:`bench_us`); every failure is
    recorded, not raised. With ``second_opinion``, a Triton time below the speed goal is taken
    again and the faster kept (noise only ever adds time). Returns the reference's outputs for
    :func:`measure_graph` (None when the reference failed)."""
    device = copy.device
    r = case.result
    r.setdefault("errors", [])
    got = want = None
    try:
        got = snapshot(case.run_triton())
        sync(device)
    except Exception as e:
        r["errors"].append(f"triton: {_short(e)}")
    try:
        want = snapshot(case.run_eager())
        sync(device)
    except Exception as e:
        r["errors"].append(f"reference: {_short(e)}")
    if got is not None and want is not None:
        diffs = differences(got, want)
        r["exact"] = not diffs
        if diffs:
            r["mismatches"] = diffs
    if got is not None:
        try:
            r["triton_us"] = bench_us(case.run_triton, quick, device)
        except Exception as e:
            r["errors"].append(f"triton timing: {_short(e)}")
    if want is not None:
        try:
            r["eager_us"] = bench_us(case.run_eager, quick, device)
        except Exception as e:
            r["errors"].append(f"eager timing: {_short(e)}")
    try:
        r["copy_us"], r["copy_bytes"] = copy.time_us(case.nbytes, quick)
    except Exception as e:
        r["errors"].append(f"copy timing: {_short(e)}")
    if second_opinion and speed_ok(r.get("triton_us"), r.get("copy_us")) is False:
        try:
            second = bench_us(case.run_triton, quick, device)
            r["triton_us_runs"] = [r["triton_us"], second]
            r["triton_us"] = min(r["triton_us"], second)
        except Exception as e:
            r["errors"].append(f"triton timing: {_short(e)}")
    return want


#: What every captured output is filled with before the checking replay: the value K3's buffers
#: are allocated with (its rows past Nd keep it, in the reference's buffers too) and never a
#: kernel's output (ids >= 0 or -1), so an element the replay fails to write differs.
POISON = -7


def measure_graph(case: Case, copy: CopyBaseline, timer: GraphTimer | None, want: list[torch.Tensor] | None,
                  na: str) -> None:
    """The Triton call and the copy, each captured into a CUDA graph and its replay timed
    (:class:`GraphTimer`): the GPU's time alone. The captured call's outputs are poisoned
    (:data:`POISON`), one replay must write them equal to the reference's ``want``; a time below
    the speed goal is taken again and the faster kept. Nothing raises: a case that cannot be
    captured or replayed gets ``graph_na`` (where it failed, the first cause), and its copy goals
    fall back to the do_bench figures; ``na`` is the reason when there is no ``timer`` (no CUDA).
    Each graph is freed before this returns."""
    r = case.result
    if timer is None:
        r["graph_na"] = na
        return
    if "triton_us" not in r:
        r["graph_na"] = "no do_bench figure (the Triton call or its timing failed)"
        return
    kernel = copied = None
    stage = "capture"
    try:
        kernel = capture(case.run_triton)
        stage = "replay"
        outs = _tensors(kernel.out)
        for t in outs:
            t.fill_(POISON)
        kernel.graph.replay()
        torch.cuda.synchronize()
        if want is not None:
            diffs = differences(outs, want)
            r["graph_exact"] = not diffs
            if diffs:
                r["graph_mismatches"] = diffs
        stage = "replay timing"
        r["triton_graph_us"] = timer.replay_us(kernel.graph)
        stage = "copy capture"
        copied = capture(copy.call(case.nbytes))
        stage = "copy replay timing"
        r["copy_graph_us"] = timer.replay_us(copied.graph)
        r["copy_bytes"] = 8 * copy.elements(case.nbytes)
        if speed_ok(r["triton_graph_us"], r["copy_graph_us"]) is False:
            stage = "replay timing"
            second = timer.replay_us(kernel.graph)
            r["triton_graph_us_runs"] = [r["triton_graph_us"], second]
            r["triton_graph_us"] = min(r["triton_graph_us"], second)
    except Exception as e:
        r["graph_na"] = f"{stage}: {e if isinstance(e, CaptureError) else _short(e)}"
    finally:
        for c in (kernel, copied):
            if c is not None:
                c.close()


def speed_ok(t: float | None, copy_t: float | None) -> bool | None:
    """At least :data:`COPY_FRACTION_GOAL` of the same-bytes copy's speed (``copy_t / t``), or
    launch-bound (``t`` at most :data:`LAUNCH_BOUND_US`); None when a time is missing."""
    if t is None or copy_t is None:
        return None
    return t <= LAUNCH_BOUND_US or copy_t / t >= COPY_FRACTION_GOAL


def goal_basis(case: Case) -> str:
    """Which times the copy goals use: ``"graph"`` (the GPU's time, CUDA-graph replays of the call
    and of the copy) when both exist, else ``"do_bench"`` (``triton_us`` / ``copy_us``: the host's
    gaps included, see the module docstring)."""
    r = case.result
    return "graph" if r.get("triton_graph_us") is not None and r.get("copy_graph_us") is not None else "do_bench"


def goal_times(case: Case) -> tuple[float | None, float | None]:
    """The kernel's and the copy's time in microseconds on :func:`goal_basis`'s basis."""
    r = case.result
    if goal_basis(case) == "graph":
        return r["triton_graph_us"], r["copy_graph_us"]
    return r.get("triton_us"), r.get("copy_us")


def meets_speed_goal(case: Case) -> bool | None:
    """:func:`speed_ok` on the goal's basis (:func:`goal_basis`); a size below both the copy
    fraction and the launch bound was measured twice and the faster median kept (both printed)."""
    return speed_ok(*goal_times(case))


def derive(case: Case) -> None:
    """Ratios and bandwidths from the times."""
    r = case.result
    t, e, c, cp = (r.get(k) for k in ("triton_us", "eager_us", "compiled_us", "copy_us"))
    if t:
        r["gbps"] = case.nbytes / t / 1e3
        if e:
            r["vs_eager"] = e / t
        if c:
            r["vs_compiled"] = c / t
        if cp:
            r["copy_gbps"] = r["copy_bytes"] / cp / 1e3
            r["pct_copy"] = r["gbps"] / r["copy_gbps"]
    tg, cg = r.get("triton_graph_us"), r.get("copy_graph_us")
    if tg:
        r["graph_gbps"] = case.nbytes / tg / 1e3
        if cg:
            r["copy_graph_gbps"] = r["copy_bytes"] / cg / 1e3
            r["pct_copy_graph"] = r["graph_gbps"] / r["copy_graph_gbps"]
    r["goal_basis"] = goal_basis(case)


# ---------------------------------------------------------------------------------------------
# torch.compile, in a child process with a wall-clock cap
# ---------------------------------------------------------------------------------------------


def compile_order(cases: list[Case]) -> list[Case]:
    """Each kernel's largest size first (the goals need them), then the rest, biggest first."""
    first = [c for c in cases if c.largest]
    rest = sorted((c for c in cases if not c.largest), key=lambda c: -c.nbytes)
    return first + rest


def compiled_child(args: argparse.Namespace) -> None:
    """Child process: compile each reference with torch.compile and time it; one JSON line per case."""
    import logging

    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._logging.set_logs(dynamo=logging.ERROR, inductor=logging.ERROR)  # graph-break warnings: counted instead
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 16)
    device = torch.device(args.device)
    setup = build_cases(tuple(args.kernels), device=device, seed=args.seed, quick=args.quick)
    start = time.perf_counter()
    compiled: dict[str, Any] = {}

    def emit(case: Case, **fields: Any) -> None:
        print(RESULT_TAG + json.dumps({"id": case.id, **fields}), flush=True)

    def log(text: str) -> None:
        print(LOG_TAG + text, flush=True)

    for case in compile_order(setup.cases):
        spent = time.perf_counter() - start
        if spent > args.compile_budget:
            emit(case, compiled_na=f"skipped: the compile budget of {args.compile_budget:.0f} s was spent")
            continue
        try:
            fn = compiled.setdefault(case.kernel, torch.compile(case.ref_fn))
            breaks0 = sum(counters["graph_break"].values())
            t0 = time.perf_counter()
            out = snapshot(fn(**case.ref_kwargs))  # compiles (or recompiles for a new size)
            sync(device)
            compile_s = time.perf_counter() - t0
            breaks = sum(counters["graph_break"].values()) - breaks0
            want = snapshot(case.run_eager())
            diffs = differences(out, want)
            us = bench_us(lambda: fn(**case.ref_kwargs), args.quick, device)
            emit(case, compiled_us=us, compile_s=compile_s, graph_breaks=breaks, compiled_mismatches=diffs or None)
            log(f"[{case.id}] torch.compile: {compile_s:.1f} s to compile, {breaks} graph break(s); {us:.1f} us")
        except Exception as e:
            emit(case, compiled_na=f"torch.compile failed: {_short(e)}")
            log(f"[{case.id}] torch.compile failed: {_short(e)}")


def run_compiled(args: argparse.Namespace, cases: list[Case]) -> None:
    """Run :func:`compiled_child` with a hard deadline; fill ``compiled_us`` or ``compiled_na``.

    The child has its own session (process group), so at the deadline it is killed together with
    the compile workers it started; its stderr (compiler noise) goes to a log file, whose tail is
    printed when the child fails.
    """
    import tempfile

    by_id = {c.id: c for c in cases}
    cmd = [sys.executable, os.path.abspath(__file__), "--compiled-child", "--device", args.device, "--seed",
           str(args.seed), "--compile-budget", str(args.compile_budget), "--kernels", ",".join(args.kernels)]
    if args.quick:
        cmd.append("--quick")
    deadline = time.monotonic() + args.compile_budget + HARD_CAP_SLACK_S
    log_file = tempfile.NamedTemporaryFile("w+", prefix="zerojit-compile-", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log_file, text=True, start_new_session=True)
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    timed_out = False
    while True:
        try:
            line = lines.get(timeout=1.0)
        except queue.Empty:
            if proc.poll() is not None:  # exited (a compile worker may still hold the pipe open)
                break
            if time.monotonic() > deadline:
                timed_out = True
                break
            continue
        if line is None:
            break
        if line.startswith(RESULT_TAG):
            rec = json.loads(line[len(RESULT_TAG):])
            case = by_id.get(rec.pop("id"))
            if case is not None:
                case.result.update({k: v for k, v in rec.items() if v is not None})
        elif line.startswith(LOG_TAG):
            print(line[len(LOG_TAG):], end="", flush=True)
    if timed_out:
        print(f"# torch.compile child passed its hard cap ({args.compile_budget + HARD_CAP_SLACK_S:.0f} s): "
              "stopped", flush=True)
    rc = None
    if not timed_out:  # its output ended: let it finish by itself
        with contextlib.suppress(subprocess.TimeoutExpired):
            rc = proc.wait(timeout=30)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # the child's own session: it and any compile worker left
    if rc is None:
        rc = proc.wait()
    log_file.close()
    if rc and not timed_out:
        tail = Path(log_file.name).read_text().strip().splitlines()[-15:]
        print(f"# torch.compile child exited with status {rc}; last lines of {log_file.name}:", flush=True)
        for t in tail:
            print("#   " + t)
    for c in cases:
        if "compiled_us" not in c.result and "compiled_na" not in c.result:
            c.result["compiled_na"] = ("skipped: the compile wall-time cap was reached" if timed_out
                                       else f"the compile child exited (status {rc}) before this size")


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def _f(v: float | None, fmt: str, na: str = "n/a") -> str:
    return na if v is None else format(v, fmt)


def _human(nbytes: int) -> str:
    """``1.2K`` / ``4.1M``: bytes in powers of 1024."""
    for unit, scale in (("M", 2**20), ("K", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f}{unit}"
    return f"{nbytes}B"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.0f}%"


def _exact(v: bool | None) -> str:
    return "ok" if v else ("DIFF" if v is False else "-")


def print_table(cases: list[Case]) -> None:
    head = (f"{'kernel':<7}{'size':<24}{'bytes':>8}{'Triton µs':>10}{'graph µs':>10}{'eager µs':>11}{'compiled µs':>12}"
            f"{'copy µs':>9}{'copy graph µs':>14}{'x eager':>9}{'x compiled':>11}{'GB/s':>8}{'% copy':>8}"
            f"{'% copy graph':>13}  exact (launch / replay)")
    print(head)
    print("-" * len(head))
    notes = []
    for c in cases:
        r = c.result
        mark = "*" if c.largest else " "
        print(f"{c.kernel:<6}{mark}{c.size:<24}{_human(c.nbytes):>8}{_f(r.get('triton_us'), '.2f'):>10}"
              f"{_f(r.get('triton_graph_us'), '.2f'):>10}{_f(r.get('eager_us'), '.1f'):>11}"
              f"{_f(r.get('compiled_us'), '.1f'):>12}{_f(r.get('copy_us'), '.2f'):>9}{_f(r.get('copy_graph_us'), '.2f'):>14}"
              f"{_f(r.get('vs_eager'), '.1f'):>9}{_f(r.get('vs_compiled'), '.2f'):>11}{_f(r.get('gbps'), '.0f'):>8}"
              f"{_pct(r.get('pct_copy')):>8}{_pct(r.get('pct_copy_graph')):>13}"
              f"  {_exact(r.get('exact'))} / {_exact(r.get('graph_exact'))}")
        if r.get("graph_na"):
            notes.append(f"{c.id}: graph n/a: {r['graph_na']}"
                         + ("; its copy goals use the do_bench figures" if r.get("goal_basis") == "do_bench" else ""))
        if r.get("compiled_na"):
            notes.append(f"{c.id}: compiled n/a: {r['compiled_na']}")
        elif r.get("graph_breaks"):
            notes.append(f"{c.id}: compiled reference: {r['graph_breaks']} graph break(s), "
                         f"{r.get('compile_s', 0):.1f} s to compile")
        for e in r.get("errors", []):
            notes.append(f"{c.id}: ERROR {e}")
        for m in r.get("mismatches", []):
            notes.append(f"{c.id}: MISMATCH Triton vs reference: {m}")
        for m in r.get("graph_mismatches", []):
            notes.append(f"{c.id}: MISMATCH CUDA-graph replay vs reference: {m}")
        for m in r.get("compiled_mismatches", None) or []:
            notes.append(f"{c.id}: compiled reference differs from eager: {m}")
    print("(* = the kernel's largest size, where the goals are checked; times are medians with L2 flushed)")
    print("(Triton µs, copy µs: do_bench of the call, the host's gaps included; GB/s and % copy from these. graph µs, "
          "copy graph µs: CUDA-graph")
    print(" replays of the same calls, the GPU's time alone, which the copy goals use; % copy graph from these. "
          "eager, compiled: the PyTorch reference)")
    for n in notes:
        print("  " + n)


def goals(cases: list[Case], monitor_counts: Any) -> list[dict[str, Any]]:
    """The issue's goals, each PASS / FAIL / n/a with the measured value. Under ``TRITON_INTERPRET=1``
    (the CPU plumbing check) the speed goals are n/a: interpreted times measure nothing."""
    out = []
    untimed = interpreting()

    def add(goal: str, ok: bool | None, value: str, speed: bool = True) -> None:
        if speed and untimed and ok is not None:
            ok, value = None, f"TRITON_INTERPRET=1, interpreted times mean nothing (measured: {value})"
        out.append({"goal": goal, "status": "n/a" if ok is None else ("PASS" if ok else "FAIL"), "value": value})

    for c in (c for c in cases if c.largest):
        r = c.result
        ve, vc = r.get("vs_eager"), r.get("vs_compiled")
        add(f"{c.kernel} {c.name} at {c.size}: >= {EAGER_SPEEDUP_GOAL:g}x faster than eager",
            None if ve is None else ve >= EAGER_SPEEDUP_GOAL, "n/a" if ve is None else f"{ve:.1f}x")
        add(f"{c.kernel} {c.name} at {c.size}: no slower than torch.compile",
            None if vc is None else vc >= COMPILED_SPEEDUP_GOAL,
            (_f(vc, ".2f") + "x") if vc is not None else r.get("compiled_na", "n/a"))
    k1 = [c for c in cases if c.kernel == "K1" and c.tokens == K1_GOAL_TOKENS]
    for c in k1:
        basis = c.result.get("goal_basis")
        p = c.result.get("pct_copy_graph" if basis == "graph" else "pct_copy")
        add(f"K1 at {c.size}: >= {100 * K1_COPY_FRACTION_GOAL:.0f}% of the copy's bandwidth",
            None if p is None else p >= K1_COPY_FRACTION_GOAL,
            "n/a" if p is None else f"{100 * p:.1f}% ({_basis_words(c)})")
    if not k1:
        add(f"K1 at T = {K1_GOAL_TOKENS}: >= {100 * K1_COPY_FRACTION_GOAL:.0f}% of the copy's bandwidth", None,
            "not measured")
    slow = [c for c in cases if meets_speed_goal(c) is False]
    timed = [c for c in cases if meets_speed_goal(c) is not None]
    fallback = [c for c in timed if goal_basis(c) == "do_bench"]
    on_do_bench = [ok for ok in (speed_ok(c.result.get("triton_us"), c.result.get("copy_us")) for c in cases)
                   if ok is not None]
    add(f"every size: >= {100 * COPY_FRACTION_GOAL:.0f}% of the copy or launch-bound (<= {LAUNCH_BOUND_US:g} us), "
        "on GPU time (graph replays)", (not slow) if timed else None,
        f"{len(timed) - len(slow)}/{len(timed)} sizes"
        + (f" ({len(fallback)} on do_bench figures: graph n/a)" if fallback else "")
        + "".join(f"; {c.id}: {_slow_words(c)}" for c in slow)
        + f"; on the do_bench figures (host included, not the goal): {sum(on_do_bench)}/{len(on_do_bench)} sizes")
    checked = [c for c in cases if "exact" in c.result]
    bad = [c.id for c in cases if c.result.get("exact") is False]
    add("every Triton output equals its reference exactly", (not bad and len(checked) == len(cases)) if cases else None,
        f"{len(checked) - len(bad)}/{len(cases)} sizes exact" + (f"; differ: {', '.join(bad)}" if bad else ""),
        speed=False)
    replayed = [c for c in cases if "graph_exact" in c.result]
    bad = [c.id for c in replayed if not c.result["graph_exact"]]
    na = [c.id for c in cases if "graph_exact" not in c.result]
    add("every CUDA-graph replay's output equals the reference exactly", (not bad) if replayed else None,
        (f"{len(replayed) - len(bad)}/{len(cases)} sizes exact" + (f"; differ: {', '.join(bad)}" if bad else "")
         + (f"; not replayed: {', '.join(na)}" if na else "")) if replayed
        else f"none replayed ({_common_na(cases)})", speed=False)
    if monitor_counts is not None:
        n = monitor_counts.runtime_compiles + monitor_counts.direct_compiles + monitor_counts.direct_disk_loads
        add("no runtime compile while timing or capturing graphs (JitMonitor, error mode)", n == 0,
            f"{n} runtime compiles over {monitor_counts.launches} launches", speed=False)
    return out


def _basis_words(c: Case) -> str:
    return "graph replay" if c.result.get("goal_basis") == "graph" else "do_bench: graph n/a"


def _slow_words(c: Case) -> str:
    """A size that misses the speed goal: its times on the goal's basis, both runs, the copy fraction."""
    r = c.result
    t, cp = goal_times(c)
    runs = r.get("triton_graph_us_runs" if goal_basis(c) == "graph" else "triton_us_runs")
    both = f" (runs {', '.join(f'{x:.2f}' for x in runs)})" if runs else ""
    return f"{t:.2f} us{both}, {100 * cp / t:.0f}% of the copy ({_basis_words(c)})"


def _common_na(cases: list[Case]) -> str:
    reasons = sorted({c.result.get("graph_na", "-") for c in cases})
    return "; ".join(reasons)[:200]


def print_goals(gs: list[dict[str, Any]]) -> None:
    print("\ngoals")
    for g in gs:
        print(f"  {g['status']:<5} {g['goal']}: {g['value']}")


def case_record(c: Case) -> dict[str, Any]:
    return {"kernel": c.kernel, "name": c.name, "size": c.size, "kind": c.kind, "tokens": c.tokens,
            "config": c.config, "variant": c.variant, "largest": c.largest, "bytes_read": c.bytes_read,
            "bytes_written": c.bytes_written, "bytes": c.nbytes, **c.result}


def environment() -> dict[str, Any]:
    import triton

    env = {"python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
           "zerojit": zerojit_version()}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env.update(gpu=p.name, capability=f"{p.major}.{p.minor}", gpu_memory_gib=round(p.total_memory / 2**30, 1))
    return env


def zerojit_version() -> str:
    import zerojit

    return zerojit.__version__


METHOD = {
    "timer": "triton.testing.do_bench, CUDA events around each call, median (triton_us, eager_us, compiled_us, "
             "copy_us: host gaps between a call's GPU ops included)",
    "l2": "flushed before every call (do_bench zeroes a 256 MB buffer; not timed)",
    "graph": "triton_graph_us, copy_graph_us: the same call captured into a torch.cuda.CUDAGraph (warmed once "
             f"on a side stream), its replay timed: a {GraphTimer.FLUSH_BYTES >> 20} MiB buffer zeroed before each "
             f"replay (not timed), CUDA events around the replay only, median of {GraphTimer.REPLAYS[1]} replays "
             f"({GraphTimer.QUICK_REPLAYS[1]} with --quick) after {GraphTimer.REPLAYS[0]} "
             f"({GraphTimer.QUICK_REPLAYS[0]}) untimed: the GPU's time alone. The captured outputs are filled with "
             f"{POISON}, replayed once and compared with the reference (graph_exact); graph_na: why a case has no "
             "graph figure",
    "goal_basis": f"the copy goals (every size >= {100 * COPY_FRACTION_GOAL:.0f}% of the copy or <= "
                  f"{LAUNCH_BOUND_US:g} us; K1 at T={K1_GOAL_TOKENS} >= {100 * K1_COPY_FRACTION_GOAL:.0f}%) use the "
                  "graph times; a case without them (graph_na) falls back to the do_bench times",
    "triton": "the zerojit launcher (output allocation + launch) after registry warm-up; JitMonitor in error mode",
    "eager": "zerojit.kernels.mla.reference, eager (host syncs included)",
    "compiled": "torch.compile(reference) with default options, one per kernel, in a child process with a wall-time cap",
    "copy": "dst.copy_(src), int32, same bytes (read + write) as the kernel",
    "bytes": "minimal read + write per kernel, see the module docstring",
}


# ---------------------------------------------------------------------------------------------
# Modes
# ---------------------------------------------------------------------------------------------


def interpreting() -> bool:
    from triton import knobs

    return bool(knobs.runtime.interpret)


def run_timed(args: argparse.Namespace) -> int:
    """The benchmark: build, warm up, time (monitor in error mode), compile, report."""
    from zerojit.monitor import JitMonitor
    from zerojit.registry import JitWarmupRegistry

    t_start = time.perf_counter()
    device = torch.device(args.device)
    interp = interpreting()  # the CPU plumbing check: nothing compiles, times mean nothing
    env = environment()
    print(f"# {env.get('gpu', 'cpu (TRITON_INTERPRET=1: plumbing check only, times are meaningless)')}"
          f" sm {env.get('capability', '-')}, torch {env['torch']}, triton {env['triton']}, zerojit {env['zerojit']}",
          flush=True)
    registries: dict[str, JitWarmupRegistry] = {}

    def register(name: str):
        registries[name] = JitWarmupRegistry()
        return registries[name].activate()

    setup = build_cases(tuple(args.kernels), device=device, seed=args.seed, quick=args.quick, register=register)
    sync(device)
    print(f"# {len(setup.cases)} cases built in {time.perf_counter() - t_start:.1f} s", flush=True)

    reports, warm = [], {}
    for name, reg in ({} if interp else registries).items():  # compile + load every registered key
        rep = reg.warmup(setup.builders[name].config, workers=WARMUP_WORKERS, progress=False, raise_on_failure=False)
        reports.append(rep)
        warm[name] = rep.to_dict()
        print(f"# warm-up {name}: {rep.num_keys} keys in {rep.seconds:.1f} s, {len(rep.failures)} failures", flush=True)
        for f in rep.failures:
            print(f"#   FAILED {f}", flush=True)

    copy = CopyBaseline(device)
    timer = GraphTimer(device, args.quick) if device.type == "cuda" and not interp else None
    no_graph = "no CUDA" if device.type != "cuda" else "TRITON_INTERPRET=1 (no GPU kernels)"
    monitor = JitMonitor("off" if interp else "error")
    for rep in reports:
        monitor.add_report(rep)
    with monitor:  # from here on a compile is a runtime compile: error mode raises instead
        for case in setup.cases:  # capture launches through zerojit too; a replay never enters Python
            want = measure(case, copy, args.quick, second_opinion=not interp)
            measure_graph(case, copy, timer, want, no_graph)
            r = case.result
            for m in r.get("mismatches", []):
                print(f"!!! MISMATCH {case.id}: the Triton output differs from the reference: {m}", file=sys.stderr,
                      flush=True)
            for m in r.get("graph_mismatches", []):
                print(f"!!! MISMATCH {case.id}: the CUDA-graph replay's output differs from the reference: {m}",
                      file=sys.stderr, flush=True)
            graph = (f"graph {_f(r.get('triton_graph_us'), '.2f')} us (copy {_f(r.get('copy_graph_us'), '.2f')} us)"
                     f", graph exact {r.get('graph_exact', '-')}" if "graph_na" not in r
                     else f"graph n/a ({r['graph_na']})")
            print(f"[{case.id}] triton {_f(r.get('triton_us'), '.2f')} us, eager {_f(r.get('eager_us'), '.1f')} us, "
                  f"copy {_f(r.get('copy_us'), '.2f')} us, exact {r.get('exact', '-')}; {graph}"
                  + (f", errors: {r['errors']}" if r["errors"] else ""), flush=True)
    counts = None if interp else monitor.counts()

    if args.no_compile:
        for c in setup.cases:
            c.result["compiled_na"] = "skipped (--no-compile)"
    else:
        print(f"# torch.compile of the references in a child process (budget {args.compile_budget:.0f} s, "
              f"hard cap {args.compile_budget + HARD_CAP_SLACK_S:.0f} s) ...", flush=True)
        run_compiled(args, setup.cases)
    for c in setup.cases:
        derive(c)

    print()
    print_table(setup.cases)
    gs = goals(setup.cases, counts)
    print_goals(gs)
    total = time.perf_counter() - t_start
    print(f"\n# total {total:.0f} s", flush=True)
    if args.json:
        write_output(args.json, json.dumps({"environment": env, "method": METHOD, "quick": args.quick, "seed": args.seed,
                                            "warmup": warm,
                                            "monitor": None if counts is None else dataclasses.asdict(counts),
                                            "cases": [case_record(c) for c in setup.cases], "goals": gs,
                                            "seconds": total}, indent=2))
        print(f"# wrote {args.json}")
    failed = any(c.result.get("exact") is False or c.result.get("graph_exact") is False or c.result.get("errors")
                 for c in setup.cases)
    if failed:
        print("# FAILED: a kernel output (launched or graph-replayed) differs from its reference or a case raised "
              "(see above)", file=sys.stderr)
    return 1 if failed else 0


def run_dry(args: argparse.Namespace) -> int:
    """Inputs, references and byte counts on the CPU; then compile-only dry launches."""
    from zerojit.registry import JitWarmupRegistry

    t_start = time.perf_counter()
    device = torch.device(args.device)
    registries: dict[str, JitWarmupRegistry] = {}

    def register(name: str):
        registries[name] = JitWarmupRegistry()
        return registries[name].activate()

    setup = build_cases(tuple(args.kernels), device=device, seed=args.seed, quick=args.quick, register=register)
    print(f"# dry run on {device}: {len(setup.cases)} cases (no timings)")
    for name, b in setup.builders.items():
        p = b.plan
        print(f"# {name}: block_size {b.config.block_size}, top-k {b.config.index_topk}, cache {b.num_blocks} blocks, "
              f"block_stride_rows {p.block_stride_rows}, compressed {dict(p.compressed_block_strides)}, "
              f"swa {p.swa_block_stride_rows}; steps: " + "; ".join(
                  f"{s.label} (contexts {min(s.batch.seq_lens)}-{max(s.batch.seq_lens)})" for s in b.scenarios))
    head = f"{'kernel':<7}{'size':<24}{'variant':<22}{'read B':>13}{'written B':>13}{'total MiB':>11}  reference"
    print(head)
    print("-" * len(head))
    bad = 0
    for c in setup.cases:
        try:
            out = c.run_eager()
            status = "ok: " + ", ".join(f"{t.dtype}{tuple(t.shape)}".replace("torch.", "") for t in _tensors(out))
        except Exception as e:
            status, bad = f"FAILED {_short(e)}", bad + 1
        c.result["reference"] = status
        mark = "*" if c.largest else " "
        print(f"{c.kernel:<6}{mark}{c.size:<24}{c.variant:<22}{c.bytes_read:>13,}{c.bytes_written:>13,}"
              f"{c.nbytes / 2**20:>11.2f}  {status}", flush=True)

    if not args.no_dry_launch:
        bad += dry_launch(setup, registries)
    print(f"# dry run done in {time.perf_counter() - t_start:.0f} s, {bad} failure(s)")
    if args.json:
        write_output(args.json, json.dumps({"environment": environment(), "dry": True,
                                            "cases": [case_record(c) for c in setup.cases]}, indent=2))
    return 1 if bad else 0


def dry_launch(setup: Setup, registries: dict[str, Any]) -> int:
    """Warm every registered key for cuda:90 (compile only) and dry-launch each case with the monitor
    in error mode: a case that would compile at run time on the GPU fails here."""
    from zerojit.compile_only import compile_only
    from zerojit.monitor import JitMonitor

    bad = 0
    print("# compile-only warm-up for cuda:90 and dry launches (monitor in error mode) ...", flush=True)
    with compile_only("cuda:90"):
        reports = []
        for name, reg in registries.items():
            rep = reg.warmup(setup.builders[name].config, workers=WARMUP_WORKERS, progress=False,
                             raise_on_failure=False, target="cuda:90")
            reports.append(rep)
            print(f"# warm-up {name}: {rep.num_keys} keys in {rep.seconds:.1f} s, {len(rep.failures)} failures",
                  flush=True)
            for f in rep.failures:
                print(f"#   FAILED {f}")
                bad += 1
        monitor = JitMonitor("error")
        for rep in reports:
            monitor.add_report(rep)
        with monitor:
            for c in setup.cases:
                try:
                    c.run_triton()
                    c.result["dry_launch"] = "ok (warmed key)"
                except Exception as e:
                    c.result["dry_launch"] = f"FAILED {_short(e)}"
                    bad += 1
                print(f"  dry launch {c.id:<28} {c.result['dry_launch']}", flush=True)
        counts = monitor.counts()
    print(f"# dry launches: {counts.launches} launches, {counts.runtime_compiles} runtime compiles")
    return bad


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="Details (sizes, byte counts, timing method): the module docstring.")
    parser.add_argument("--json", help="also write every measurement here")
    parser.add_argument("--quick", action="store_true",
                        help="only the goal sizes (decode R=64, prefill T=8192) and shorter timings")
    parser.add_argument("--kernels", default=",".join(KERNELS), help="comma-separated subset of K1..K7 (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="seeds block ids and top-k draws (default 0)")
    parser.add_argument("--compile-budget", type=float, default=None,
                        help="seconds of torch.compile work before the remaining sizes are skipped "
                             "(default 120, 60 with --quick); the child is killed at budget + 60 s")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile column")
    parser.add_argument("--device", default=None, help="cuda (default when available) or cpu (needs --dry)")
    parser.add_argument("--dry", action="store_true",
                        help="no timings: build inputs, run the references, print byte counts (works on cpu)")
    parser.add_argument("--no-dry-launch", action="store_true",
                        help="with --dry: skip the compile-only warm-up and dry launches")
    parser.add_argument("--compiled-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    ks = tuple(k.strip().upper() for k in args.kernels.split(",") if k.strip())
    unknown = [k for k in ks if k not in KERNELS]
    if unknown:
        parser.error(f"--kernels: unknown {unknown}; choose among {', '.join(KERNELS)}")
    args.kernels = [k for k in KERNELS if k in ks]
    if args.compile_budget is None:
        args.compile_budget = 60.0 if args.quick else 120.0
    if args.compile_budget < 0:
        parser.error(f"--compile-budget must be >= 0 seconds, got {args.compile_budget:g}")
    if args.json and (problem := output_problem(args.json)):  # not after minutes of measuring
        parser.error(f"--json {args.json}: cannot write there: {problem}")
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device not in ("cuda", "cpu"):
        parser.error(f"--device must be cuda or cpu, got {args.device!r}")
    if args.device == "cpu" and not args.dry and not args.compiled_child and not interpreting():
        parser.error("timings need a CUDA GPU; on a machine without one use --device cpu --dry "
                     "(or TRITON_INTERPRET=1 for a plumbing check whose times mean nothing)")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA GPU is available; use --device cpu --dry")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.compiled_child:
        compiled_child(args)
        return 0
    if args.dry:
        return run_dry(args)
    return run_timed(args)


if __name__ == "__main__":
    sys.exit(main())
