"""The runner's decode steps as CUDA graphs (``zerojit run --cuda-graphs``), as engines run them.

Engines capture their decode step once per *batch-size bucket* and replay the graph for every
later decode step of that bucket (vLLM's ``cudagraph_capture_sizes``, SGLang's
``cuda_graph_bs``). The runner does the same with the sparse-MLA metadata kernels a decode step
launches (K2, K3, K1's decode rows, K6 causal and non-causal: :func:`decode_step_metadata`):

* **Buckets**: ``config.cuda_graph_batch_sizes`` (sorted, unique). A step is a *graph step*
  when it has no prefill, every request decodes ``Lq = 1 + num_speculative_tokens`` tokens
  and it has at most the largest size's requests (:func:`graph_bucket`); it replays the graph
  of the smallest size ``>= B``. Steps with prefills or more requests run eagerly (K4, K5 and
  K7 run only with prefills: their host ints are the step's context lengths, which no bucket
  fixes; so piecewise capture of mixed steps is not covered).
* **Padding** (:func:`pad_decode_inputs`): a step of ``B`` requests is padded to the bucket's
  ``N`` requests and ``N * Lq`` token rows, as engines pad: each padding request has
  ``seq_len`` 0, query length 0 (``query_start_loc`` repeats its last value) and null-block
  rows (block id 0); each padding token row has window slot -1 (``PAD_SLOT_ID``: K6 writes an
  empty window), indexer positions -1 (K1 writes -1 and counts 0) and belongs to the last
  padding request. Live rows come first, so a live output row equals the eager step's.
* **Host ints** (:func:`captured_host_ints`): every int a captured launch is given (and with
  the tensor shapes, every grid) is a function of the config and the bucket alone, never of the
  step: a replay re-runs the launches with the captured ints. The values a step changes (query
  and context lengths, block tables, slots, top-k positions) reach the kernels only through the
  bucket's static device tensors, into which each step's padded inputs are copied before
  :meth:`torch.cuda.CUDAGraph.replay`. No launcher reads a device value on the host while a
  capture is open (K6's non-causal check is given ``max_query_len = Lq``; K7's layout checks
  read values only on the CPU and K7 is not captured).
* **Capture**: the bucket's launches run once eagerly (on a side stream, as
  ``torch.cuda.graph`` asks: lazy initialisations and any miss happen outside the capture),
  then under ``torch.cuda.graph``. The JIT monitor (installed by the run, every mode) refuses
  any miss inside the capture (:class:`zerojit.monitor.CaptureCompileError`); the Triton
  compiles and disk loads counted inside captures and replays (``compiles``) must be 0.
* **Reported** (:class:`GraphReport`): graphs captured, replays (replays bypass zerojit's launch
  path, so the monitor's launch counts do not include them), compiles during capture and
  replay, graph-vs-eager checks, and the median decode step with and without graphs: every
  graph step also runs eagerly on the same inputs right after its replay (timed apart, not in
  the step's time), so the two medians are over the same steps.
"""

from __future__ import annotations

import bisect
import dataclasses
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from zerojit.kernels.mla.index import FLAVOUR_INPUTS

from .metadata import (KERNELS, DecodeBuffers, MetadataOps, MetadataPlan, StepInputs, StepMetadata,
                       build_step_inputs, compare_metadata, step_metadata)
from .scheduler import Batch

__all__ = ["graph_bucket", "pad_decode_inputs", "captured_host_ints", "decode_step_metadata", "live_rows",
           "GraphReport", "DecodeGraphs"]

I32 = torch.int32


def graph_bucket(batch: Batch, sizes: Sequence[int], query_len: int) -> int | None:
    """The captured batch size that serves ``batch``: the smallest of ``sizes`` (sorted) that is
    ``>= batch.num_reqs``; None when the step runs eagerly (it has a prefill, a request that does
    not decode ``query_len`` tokens, no request, or more requests than the largest size)."""
    if batch.num_prefills or not batch.num_reqs or any(q != query_len for q in batch.query_lens):
        return None
    i = bisect.bisect_left(sizes, batch.num_reqs)
    return sizes[i] if i < len(sizes) else None


def pad_decode_inputs(inputs: StepInputs, bucket: int, query_len: int) -> StepInputs:
    """``inputs`` of a decode-only step of ``B <= bucket`` requests, padded to ``bucket``
    requests and ``bucket * query_len`` token rows (the module docstring's padding: seq_len 0,
    query length 0, null blocks, slot -1, top-k positions -1). Live rows keep their values and
    positions.

    Raises:
        ValueError: the step has prefills or more requests than ``bucket``.
    """
    R, nd = inputs.num_reqs, inputs.num_decodes
    if inputs.num_prefills or R > bucket:
        raise ValueError(f"pad_decode_inputs: a decode-only step of at most {bucket} requests is padded, got "
                         f"{nd} decodes and {inputs.num_prefills} prefills")
    P, T, Tn = bucket - R, inputs.num_tokens, bucket * query_len
    dev = inputs.device

    def rows(t: Tensor, n: int, value: int) -> Tensor:
        return torch.cat([t, torch.full((n, *t.shape[1:]), value, dtype=t.dtype, device=dev)])

    qsl = inputs.query_start_loc
    return dataclasses.replace(
        inputs, query_lens=inputs.query_lens + (0,) * P, seq_lens_host=inputs.seq_lens_host + (0,) * P,
        num_decodes=bucket, chunks=(), query_start_loc=torch.cat([qsl, qsl[R:].expand(P)]),
        seq_lens=rows(inputs.seq_lens, P, 0), block_table=rows(inputs.block_table, P, 0),
        swa_block_table=rows(inputs.swa_block_table, P, 0), token_to_req=rows(inputs.token_to_req, Tn - T, bucket - 1),
        swa_slot_mapping=rows(inputs.swa_slot_mapping, Tn - T, -1),
        token_indices=None if inputs.token_indices is None else rows(inputs.token_indices, Tn - T, -1),
        compressed_topk=None)


def captured_host_ints(plan: MetadataPlan, bucket: int) -> dict[str, dict[str, int]]:
    """Every host int each launch of a captured decode step of ``bucket`` requests takes, by
    launch (the names of :func:`decode_step_metadata`'s outputs, less the output's name): a
    function of the plan (config, backend, cache strides) and the bucket only, which is what
    makes a replay correct for any step of the bucket. :func:`decode_step_metadata` launches
    with exactly these; the launchers derive their grids from them and from the bucket's tensor
    shapes (K2 ``split_grid(N, N*Lq)``, K3 ``(N*Lq,)``, K1 ``(N*Lq, cdiv(index_topk, BLOCK_N))``,
    K6 ``(cdiv(N*Lq, BLOCK_T),)``).

    K4, K5 and K7 run only in steps with prefills, which are not captured: their host ints
    (K5's ``num_decodes`` / ``num_prefills``, K4's ``num_compressed``, K7's ``num_tokens``,
    ``row_stride``, ``swa_offset``, ``max_gather_len``, ``max_compressed_len``) are the step's
    context lengths.
    """
    cfg = plan.config
    lq, n = cfg.query_len, bucket
    tokens = n * lq
    out: dict[str, dict[str, int]] = {}
    for ratio, stride in plan.compressed_caches:
        out[f"K2 slot_mapping ratio {ratio}"] = dict(num_tokens=tokens, ratio=ratio, block_size=cfg.block_size,
                                                     block_stride_rows=stride, **plan.dcp)
    if plan.uniform_decode and lq > 1:
        out["K3"] = dict(query_len=lq, num_decode_tokens=tokens)
    if plan.launches("K1"):
        spec = FLAVOUR_INPUTS[plan.index_flavours[0]]
        out["K1 decode"] = dict(rows=tokens, block_size=cfg.block_size,
                                block_stride_rows=plan.fact("K1", "block_stride_rows"),
                                max_num_blocks_per_req=plan.table_width, **(plan.dcp if spec["dcp"] else {}))
    swa = dict(token_offset=0, sliding_window=cfg.sliding_window, block_size=cfg.block_size,
               block_stride_rows=plan.fact("K6", "block_stride_rows"),
               num_speculative_tokens=cfg.num_speculative_tokens)
    out["K6 causal"] = dict(num_tokens=tokens, **swa)
    if plan.noncausal_drafts:
        out["K6 draft"] = dict(num_tokens=tokens, max_query_len=lq, **swa)
    return out


def decode_step_metadata(inputs: StepInputs, plan: MetadataPlan, ops: MetadataOps, buffers: DecodeBuffers | None,
                         bucket: int) -> StepMetadata:
    """A decode step of ``bucket`` padded requests (:func:`pad_decode_inputs`) through ``ops``,
    every launch taking its host ints from :func:`captured_host_ints` (none from ``inputs``'
    host facts): what the bucket's graph captures. Outputs are named as
    :func:`~zerojit.runner.metadata.step_metadata` names them, with ``bucket * Lq`` token rows.
    """
    out, ints = StepMetadata(), captured_host_ints(plan, bucket)
    qsl, seq, dev = inputs.query_start_loc, inputs.seq_lens, inputs.device
    for ratio, _ in plan.compressed_caches:
        name = f"K2 slot_mapping ratio {ratio}"
        out.add(name, ops.compressed_slot_mapping(query_start_loc=qsl, seq_lens=seq, block_table=inputs.block_table,
                                                  **ints[name]))
    if "K3" in ints:
        s, bt = ops.prepare_uniform_decode(seq_lens=seq, block_table=inputs.block_table,
                                           expanded_seq_lens=buffers.expanded_seq_lens,
                                           expanded_block_table=buffers.expanded_block_table, **ints["K3"])
        out.add("K3 expanded_seq_lens", s)
        out.add("K3 expanded_block_table", bt)
    if "K1 decode" in ints:
        spec = FLAVOUR_INPUTS[plan.index_flavours[0]]
        kw = dict(ints["K1 decode"])
        rows = kw.pop("rows")
        if spec["has_workspace"]:  # decode rows in a workspace flavour: no row reads the workspace
            kw.update(prefill_workspace_request_ids=torch.full((rows,), -1, dtype=I32, device=dev),
                      prefill_workspace_starts=torch.zeros(1, dtype=I32, device=dev))
        slots, counts = ops.convert_req_index_to_global_index(
            req_id=inputs.token_to_req[:rows], block_table=inputs.block_table, token_indices=inputs.token_indices[:rows],
            count_valid=spec["count_valid"], compact=spec["compact"], **kw)
        out.add("K1 decode out", slots, compact=spec["compact"])
        out.add("K1 decode valid_counts", counts)
    tensors = dict(token_to_req=inputs.token_to_req, slot_mapping=inputs.swa_slot_mapping, seq_lens=seq,
                   query_start_loc=qsl, block_table=inputs.swa_block_table)
    idx, lens = ops.compute_swa_indices_and_lens(causal=True, **tensors, **ints["K6 causal"])
    out.add("K6 causal swa_indices", idx)
    out.add("K6 causal swa_lens", lens)
    if "K6 draft" in ints:
        idx, lens = ops.compute_swa_indices_and_lens(causal=False, **tensors, **ints["K6 draft"])
        out.add("K6 draft swa_indices", idx)
        out.add("K6 draft swa_lens", lens)
    return out


def live_rows(padded: StepMetadata, num_tokens: int) -> StepMetadata:
    """The first ``num_tokens`` rows of every output of a decode step, padded or not: what the
    unpadded step computes (every decode-step output has one row per token; K3's outputs are its
    persistent buffers, whose rows past the step's are left as they were)."""
    out = StepMetadata(compact=set(padded.compact))
    for name, value in padded.outputs.items():
        out.outputs[name] = value[:num_tokens]
    return out


@dataclass
class GraphReport:
    """What ``--cuda-graphs`` did (``RunReport.graphs``; ``--json`` key ``cuda_graphs``).

    Attributes:
        batch_sizes: the config's ``cuda_graph_batch_sizes``.
        captures: graphs captured (one per bucket a step reached).
        replays: graph replays (= graph steps; zerojit's launch counts do not include them).
        compiles: Triton compiles and disk loads counted during captures and replays (must be 0).
        eager_steps: decode-only steps that ran eagerly (no bucket fits).
        checked: graph steps whose live outputs were compared with the eager launch of the same
            inputs; ``mismatches``: the differences found, one line each.
        graph_step_ms, eager_step_ms: each graph step's time with its graph (inputs built,
            copied, replayed, synchronized) and eagerly (inputs built, launched, synchronized).
    """

    batch_sizes: tuple[int, ...]
    captures: int = 0
    replays: int = 0
    compiles: int = 0
    eager_steps: int = 0
    checked: int = 0
    mismatches: list[str] = field(default_factory=list)
    graph_step_ms: list[float] = field(default_factory=list)
    eager_step_ms: list[float] = field(default_factory=list)

    @property
    def median_decode_graph_ms(self) -> float | None:
        """Median graph step, ms (None: no graph step)."""
        return statistics.median(self.graph_step_ms) if self.graph_step_ms else None

    @property
    def median_decode_eager_ms(self) -> float | None:
        """Median of the same steps run eagerly, ms (None: no graph step)."""
        return statistics.median(self.eager_step_ms) if self.eager_step_ms else None

    @property
    def ok(self) -> bool:
        """Nothing compiled or loaded during capture and replay, and every check was equal."""
        return self.compiles == 0 and not self.mismatches

    def to_dict(self) -> dict[str, Any]:
        """The ``cuda_graphs`` object of ``zerojit run --json`` (docs/cli.md)."""
        med = lambda v: None if v is None else round(v, 3)  # noqa: E731
        return dict(batch_sizes=list(self.batch_sizes), captures=self.captures, replays=self.replays,
                    compiles_during_capture_and_replay=self.compiles, eager_decode_steps=self.eager_steps,
                    checked=self.checked, mismatches=list(self.mismatches),
                    median_decode_graph_ms=med(self.median_decode_graph_ms),
                    median_decode_eager_ms=med(self.median_decode_eager_ms))

    def summary(self) -> str:
        """The report's ``graphs`` line."""
        g, e = self.median_decode_graph_ms, self.median_decode_eager_ms
        speed = (f"median decode step {g:.3f} ms with graphs, {e:.3f} ms without ({e / g:.2f}x)"
                 if g is not None and e is not None and g > 0 else "no graph step")
        checks = (f"{self.checked} graph steps checked against eager: "
                  + ("all equal" if not self.mismatches else f"{len(self.mismatches)} differences"))
        return (f"CUDA graphs: {self.captures} captured (batch sizes {list(self.batch_sizes)}), {self.replays} "
                f"replays, {self.compiles} compiles during capture and replay, {self.eager_steps} decode steps "
                f"eager (no bucket); {checks}; {speed}")


class DecodeGraphs:
    """The run's decode-step graphs, one per bucket, captured at the first step that needs it.

    Args:
        plan: the run's plan.
        device: a CUDA device.
        seed: the run's seed (each step's top-k draws).
        checks: how many graph steps to compare with eager (``--check N``): the first N.
        compile_marker: returns a number that grows with every Triton compile or disk load (the
            run's request-path clock), read around captures and replays.
    """

    def __init__(self, plan: MetadataPlan, device: torch.device, *, seed: int, checks: int,
                 compile_marker: Callable[[], Any]) -> None:
        self.plan, self.device, self.seed, self.checks = plan, device, seed, checks
        self.marker = compile_marker
        self.sizes = tuple(plan.config.cuda_graph_batch_sizes)
        self.report = GraphReport(self.sizes)
        self.buffers = DecodeBuffers.allocate(plan, device=device)  # K3's, shared by the graphs
        self.eager_buffers = DecodeBuffers.allocate(plan, device=device)
        self._graphs: dict[int, tuple[Any, StepInputs, StepMetadata]] = {}

    def bucket(self, batch: Batch) -> int | None:
        """The bucket that serves ``batch`` (None: it runs eagerly); counts an eager decode step."""
        b = graph_bucket(batch, self.sizes, self.plan.config.query_len)
        if b is None and not batch.num_prefills:
            self.report.eager_steps += 1
        return b

    def _capture(self, bucket: int, inputs: StepInputs) -> tuple[Any, StepInputs, StepMetadata]:
        static = dataclasses.replace(inputs, **{f: getattr(inputs, f).clone() for f in _TENSOR_FIELDS
                                                if getattr(inputs, f) is not None})
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):  # once eagerly: lazy initialisation, and any miss, outside the capture
            decode_step_metadata(static, self.plan, KERNELS, self.buffers, bucket)
        torch.cuda.current_stream(self.device).wait_stream(side)
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        mark = self.marker()
        with torch.cuda.graph(graph):  # its own memory pool: no graph's replay writes into another's outputs
            outputs = decode_step_metadata(static, self.plan, KERNELS, self.buffers, bucket)
        self.report.compiles += _delta(self.marker(), mark)
        self.report.captures += 1
        return graph, static, outputs

    def step(self, batch: Batch, bucket: int, blocks: Sequence[Sequence[int]]) -> StepMetadata:
        """Run decode step ``batch`` through its bucket's graph (capturing it first if needed),
        then eagerly on the same inputs (timed apart) and, for the first ``checks`` graph steps,
        compare the two. Returns the graph's live outputs (cloned)."""
        plan, dev = self.plan, self.device
        t0 = time.perf_counter()
        inputs = build_step_inputs(batch, plan, blocks=blocks, fill=True, seed=self.seed, device=dev)
        padded = pad_decode_inputs(inputs, bucket, plan.config.query_len)
        if bucket not in self._graphs:  # a capture is no step's cost: the step's time leaves it out
            built = time.perf_counter() - t0
            self._graphs[bucket] = self._capture(bucket, padded)
            t0 = time.perf_counter() - built
        graph, static, outputs = self._graphs[bucket]
        mark = self.marker()
        for f in _TENSOR_FIELDS:
            if getattr(static, f) is not None:
                getattr(static, f).copy_(getattr(padded, f))
        graph.replay()
        torch.cuda.synchronize(dev)
        self.report.graph_step_ms.append((time.perf_counter() - t0) * 1e3)
        self.report.compiles += _delta(self.marker(), mark)
        self.report.replays += 1
        got = live_rows(outputs, inputs.num_tokens)
        got = StepMetadata({k: v.clone() for k, v in got.outputs.items()}, set(got.compact))

        t0 = time.perf_counter()
        eager_inputs = build_step_inputs(batch, plan, blocks=blocks, fill=True, seed=self.seed, device=dev)
        want = step_metadata(eager_inputs, plan, KERNELS, self.eager_buffers)
        torch.cuda.synchronize(dev)
        self.report.eager_step_ms.append((time.perf_counter() - t0) * 1e3)
        if self.report.checked < self.checks:
            self.report.checked += 1
            self.report.mismatches += [f"step {batch.step} (bucket {bucket}): {m}"
                                       for m in compare_metadata(got, live_rows(want, inputs.num_tokens))]
        return got


#: StepInputs' tensor fields (copied into a bucket's static inputs before each replay).
_TENSOR_FIELDS = ("query_start_loc", "seq_lens", "block_table", "swa_block_table", "token_to_req",
                  "swa_slot_mapping", "token_indices", "compressed_topk")


def _delta(after: Any, before: Any) -> int:
    """Compiles plus loads between two request-path clock markers (``(compiles, loads)``)."""
    return sum(a - b for a, b in zip(after, before))
