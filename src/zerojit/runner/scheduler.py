"""A deterministic continuous-batching scheduler (vLLM-like) that turns a trace into batches.

Each :meth:`Scheduler.step` is one engine step and returns a :class:`Batch`: which requests run,
how many query tokens each contributes and how long each context is after the step. That is all
the sparse-MLA metadata kernels need (``query_start_loc``, ``seq_lens``, token counts).

Token model (the same as vLLM's):

- A request has ``prompt_len`` prompt tokens and must generate ``output_len`` tokens. Its
  *known* tokens are ``prompt_len + generated``; its *computed* tokens are those whose KV is in
  the cache. ``seq_len`` (context length) is the number of computed tokens.
- **Prefill** computes the prompt in chunks. The chunk that computes the last known token samples
  the first output token (``generated = 1``); earlier chunks sample nothing.
- **Decode**: the last sampled token is not yet computed, so a decode step's query is that token
  plus ``num_speculative_tokens`` draft tokens: ``Lq = 1 + num_speculative_tokens``. Every draft
  is assumed accepted, so a decode of ``Lq`` tokens generates ``Lq`` tokens. The last decode of a
  request is shorter when fewer than ``Lq`` tokens remain to generate
  (``Lq = min(1 + num_speculative_tokens, output_len - generated)``).
- A request finishes when ``generated == output_len``. The last sampled token is never fed back,
  so its final ``seq_len`` is ``prompt_len + output_len - 1`` (the most context the model ever
  attends over). A request needs ``prompt_len + output_len <= max_model_len``
  (:func:`~zerojit.runner.trace.load_trace` clips a trace to that), so ``seq_len`` never
  exceeds ``max_model_len``.

Policy, each step, with a token budget of ``max_num_batched_tokens``:

1. **Decodes first**: every running request past its prefill, in admission order, gets ``Lq``
   query tokens if they fit the remaining budget (else it waits a step; a decode is never cut to
   fewer draft tokens by the budget).
2. **Continue partial prefills**, in admission order: each gets
   ``min(remaining prompt, remaining budget, long_prefill_chunk)`` tokens (chunked prefill).
3. **Admit waiting requests** in trace order (strict FIFO: the head blocks the rest) while fewer
   than ``max_num_seqs`` run and budget remains; each first chunk is sized as in 2.
   A request is admissible once it has arrived (see *time* below), and, with an allocator, only
   when the blocks for its first chunk are free (otherwise it waits; admission never preempts).

A request is classified by phase, not by length: a decode is a request past its prefill; a
1-token prefill chunk is still a prefill.

KV blocks (optional :class:`~zerojit.runner.kv_blocks.BlockAllocator`): after planning, running
requests reserve the blocks for their context after the step, in admission order. When blocks run
out, the most recently admitted running request is *preempted* (vLLM's recompute preemption): its
blocks are freed, its computed tokens dropped, and it goes back to the front of the waiting queue;
when readmitted it prefills its prompt plus the tokens it had generated, and that prefill's last
chunk samples its next token. If the request short of blocks is itself the most recent, it is
preempted. A preemption gives back its tokens and blocks, so the requests still running are then
planned again (a prefill left out behind a long decode runs instead of an empty step). A step
that preempts admits nothing. The oldest running request is never preempted,
so every request finishes. Blocks of a finished request are freed at the start of the *next*
step, so :meth:`~zerojit.runner.kv_blocks.BlockAllocator.block_table` works for every request of
the batch just returned.

Time: with ``step_interval_s`` (default 0.05 s) arrivals are replayed in simulated time: each
step advances the clock by ``step_interval_s`` and a request is admissible once
``arrival_s <= clock``; when nothing is running and the next request has not arrived, the clock
jumps to its arrival (no empty steps are produced). With ``step_interval_s=None`` time is
ignored: every request is admissible from step 0, at the rate the limits allow. A preempted
request has already arrived, so it is admissible at once.

Batches list decodes first (admission order), then prefills (continuing ones in admission order,
then newly admitted ones in trace order).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterable, Iterator, Literal, Protocol

from .kv_blocks import BlockAllocator

__all__ = ["Batch", "RequestLike", "RequestState", "Scheduler", "SchedulerLimits"]


@dataclass(frozen=True)
class SchedulerLimits:
    """The limits a scheduler respects on every step.

    Attributes:
        max_num_batched_tokens: most query tokens in one step (the token budget).
        max_num_seqs: most requests running (admitted, not finished) at once; hence most
            requests in one batch.
        max_model_len: most tokens a request may hold (``prompt_len + output_len``), so the
            largest context (``seq_len``) any step produces.
        num_speculative_tokens: draft tokens per decode step; a decode query is
            ``1 + num_speculative_tokens`` tokens.
        long_prefill_chunk: most prefill tokens one request gets in one step (``None``: only
            the budget limits it).

    Raises:
        ValueError: every invalid field, reported at once.
    """

    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    num_speculative_tokens: int = 0
    long_prefill_chunk: int | None = None

    def __post_init__(self) -> None:
        errors = []
        for name in ("max_num_batched_tokens", "max_num_seqs", "max_model_len"):
            if getattr(self, name) < 1:
                errors.append(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_model_len < 2:
            errors.append(
                f"max_model_len must be >= 2 (one prompt and one output token), got {self.max_model_len}"
            )
        if self.num_speculative_tokens < 0:
            errors.append(f"num_speculative_tokens must be >= 0, got {self.num_speculative_tokens}")
        elif self.max_num_batched_tokens < 1 + self.num_speculative_tokens:
            errors.append(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must hold one decode "
                f"query of 1 + num_speculative_tokens = {1 + self.num_speculative_tokens} tokens"
            )
        if self.long_prefill_chunk is not None and self.long_prefill_chunk < 1:
            errors.append(f"long_prefill_chunk must be >= 1 or None, got {self.long_prefill_chunk}")
        if errors:
            raise ValueError("invalid SchedulerLimits: " + "; ".join(dict.fromkeys(errors)))

    @property
    def decode_query_len(self) -> int:
        """Query tokens of a full decode step: ``1 + num_speculative_tokens``."""
        return 1 + self.num_speculative_tokens


@dataclass(frozen=True)
class Batch:
    """One engine step: the requests that run and their token counts.

    All tuples have one entry per request, decodes first, then prefills.

    Attributes:
        step: 0-based index of the step.
        request_ids: the requests (``R`` of them).
        query_lens: query tokens per request this step.
        seq_lens: context length per request *after* this step (computed tokens before the step
            plus ``query_lens``), in tokens.
        num_decodes: how many of the first entries are decodes.
        clock_s: simulated time of the step in seconds (``None`` when the scheduler ignores time).
        finished: requests of this batch that finished with this step (their blocks are freed
            at the start of the next step).
        preempted: requests preempted while planning this step (not in this batch).
    """

    step: int
    request_ids: tuple[int, ...]
    query_lens: tuple[int, ...]
    seq_lens: tuple[int, ...]
    num_decodes: int
    clock_s: float | None = None
    finished: tuple[int, ...] = ()
    preempted: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        n = len(self.request_ids)
        if len(self.query_lens) != n or len(self.seq_lens) != n:
            raise ValueError(
                f"request_ids, query_lens and seq_lens must have one entry per request: "
                f"{n}, {len(self.query_lens)}, {len(self.seq_lens)}"
            )
        if not 0 <= self.num_decodes <= n:
            raise ValueError(f"num_decodes must be in [0, {n}], got {self.num_decodes}")

    def __len__(self) -> int:
        return len(self.request_ids)

    @property
    def num_reqs(self) -> int:
        """Requests in the batch (``R``)."""
        return len(self.request_ids)

    @property
    def num_prefills(self) -> int:
        """Requests of the batch in prefill (the entries after the decodes)."""
        return len(self.request_ids) - self.num_decodes

    @property
    def num_decode_tokens(self) -> int:
        """Query tokens of the decodes."""
        return sum(self.query_lens[: self.num_decodes])

    @property
    def num_prefill_tokens(self) -> int:
        """Query tokens of the prefills."""
        return sum(self.query_lens[self.num_decodes :])

    @property
    def num_tokens(self) -> int:
        """All query tokens of the step (``T``)."""
        return sum(self.query_lens)

    @property
    def max_query_len(self) -> int:
        """Longest query, in tokens (0 for an empty batch)."""
        return max(self.query_lens, default=0)

    @property
    def max_seq_len(self) -> int:
        """Longest context after the step, in tokens (0 for an empty batch)."""
        return max(self.seq_lens, default=0)

    @property
    def is_uniform_decode(self) -> bool:
        """True when every request is a decode and all have the same query length.

        (With speculative decoding that length is ``1 + num_speculative_tokens`` except when every
        request happens to be on the same shorter final decode.)
        """
        return (
            self.num_decodes > 0
            and self.num_prefills == 0
            and all(q == self.query_lens[0] for q in self.query_lens)
        )

    def query_start_loc(self) -> list[int]:
        """Cumulative query offsets with a leading 0: ``R + 1`` ints, the last is ``num_tokens``."""
        out = [0]
        for q in self.query_lens:
            out.append(out[-1] + q)
        return out


class RequestLike(Protocol):
    """What the scheduler reads from a request (a :class:`~zerojit.runner.trace.TraceRequest`)."""

    request_id: int
    arrival_s: float
    prompt_len: int
    output_len: int


Status = Literal["waiting", "running", "finished"]


@dataclass(frozen=True)
class RequestState:
    """A snapshot of one request's progress in a scheduler.

    Attributes:
        request_id, arrival_s, prompt_len, output_len: as given.
        status: ``"waiting"`` (not admitted, or preempted), ``"running"`` or ``"finished"``.
        num_computed_tokens: tokens whose KV is in the cache (the context length).
        num_generated_tokens: output tokens generated so far.
        num_preemptions: times the request was preempted.
        finish_step: the step it finished in (``None`` until it does).
    """

    request_id: int
    arrival_s: float
    prompt_len: int
    output_len: int
    status: Status
    num_computed_tokens: int
    num_generated_tokens: int
    num_preemptions: int
    finish_step: int | None


@dataclass(eq=False)
class _Request:
    request_id: int
    arrival_s: float
    prompt_len: int
    output_len: int
    status: Status = "waiting"
    num_computed: int = 0
    num_generated: int = 0
    num_preemptions: int = 0
    finish_step: int | None = None

    @property
    def num_known(self) -> int:
        return self.prompt_len + self.num_generated

    @property
    def is_decode(self) -> bool:
        return self.num_generated >= 1 and self.num_computed == self.num_known - 1


class Scheduler:
    """Continuous batching over a list of requests; see the module docstring for the policy.

    Args:
        requests: the requests (e.g. a :class:`~zerojit.runner.trace.Trace`), admitted in this
            order; each needs ``prompt_len >= 1``, ``output_len >= 1`` and
            ``prompt_len + output_len <= limits.max_model_len``; ids must be unique.
        limits: the per-step limits.
        step_interval_s: simulated seconds per step (> 0), or ``None`` to ignore arrival times.
        allocator: optional KV-block allocator; when given, requests hold blocks for their
            context and are preempted when the cache is full.

    Raises:
        ValueError: a request that breaks the rules above (clip the trace with
            ``load_trace(..., max_model_len=...)``), a request whose largest context cannot fit
            the allocator's usable blocks, or ``step_interval_s <= 0``.

    Iterate it (``for batch in scheduler:``) or call :meth:`step` until it returns ``None``.
    """

    def __init__(
        self,
        requests: Iterable[RequestLike],
        limits: SchedulerLimits,
        *,
        step_interval_s: float | None = 0.05,
        allocator: BlockAllocator | None = None,
    ) -> None:
        if step_interval_s is not None and not step_interval_s > 0:
            raise ValueError(f"step_interval_s must be > 0 or None, got {step_interval_s}")
        self.limits = limits
        self.step_interval_s = step_interval_s
        self.allocator = allocator
        self._requests: dict[int, _Request] = {}
        for r in requests:
            req = _Request(int(r.request_id), float(r.arrival_s), int(r.prompt_len), int(r.output_len))
            self._check_request(req)
            self._requests[req.request_id] = req
        self._waiting: deque[_Request] = deque(self._requests.values())
        self._running: list[_Request] = []
        self._to_free: list[_Request] = []
        self._step = 0
        self._num_finished = 0
        self._num_preemptions = 0
        self._clock_base_s = 0.0
        self._clock_steps = 0

    def _check_request(self, req: _Request) -> None:
        rid = req.request_id
        if rid in self._requests:
            raise ValueError(f"duplicate request_id {rid}")
        if req.prompt_len < 1 or req.output_len < 1:
            raise ValueError(
                f"request {rid}: prompt_len and output_len must be >= 1, "
                f"got {req.prompt_len} and {req.output_len}"
            )
        total = req.prompt_len + req.output_len
        if total > self.limits.max_model_len:
            raise ValueError(
                f"request {rid}: prompt_len + output_len = {total} exceeds max_model_len = "
                f"{self.limits.max_model_len}; load the trace with "
                f"load_trace(..., max_model_len={self.limits.max_model_len}) to clip it"
            )
        if self.allocator is not None:
            need = self.allocator.blocks_for(total - 1)
            if need > self.allocator.num_usable_blocks:
                raise ValueError(
                    f"request {rid} needs {need} KV-cache blocks for its largest context of "
                    f"{total - 1} tokens, but the allocator has only "
                    f"{self.allocator.num_usable_blocks} usable blocks"
                )

    # ------------------------------------------------------------------ state
    def __repr__(self) -> str:
        return (
            f"Scheduler(step={self._step}, waiting={len(self._waiting)}, "
            f"running={len(self._running)}, finished={self._num_finished}, limits={self.limits})"
        )

    @property
    def num_steps(self) -> int:
        """Steps produced so far."""
        return self._step

    @property
    def num_waiting(self) -> int:
        """Requests not yet admitted (including preempted ones)."""
        return len(self._waiting)

    @property
    def num_running(self) -> int:
        """Requests admitted and not finished (at most ``max_num_seqs``)."""
        return len(self._running)

    @property
    def num_finished(self) -> int:
        """Requests that generated all their output."""
        return self._num_finished

    @property
    def num_preemptions(self) -> int:
        """Preemptions so far (a request preempted twice counts twice)."""
        return self._num_preemptions

    @property
    def is_finished(self) -> bool:
        """True when every request has finished."""
        return not self._waiting and not self._running

    def request_state(self, request_id: int) -> RequestState:
        """A snapshot of one request's progress. Raises ``KeyError`` for an unknown id."""
        r = self._requests[request_id]
        return RequestState(
            r.request_id, r.arrival_s, r.prompt_len, r.output_len, r.status,
            r.num_computed, r.num_generated, r.num_preemptions, r.finish_step,
        )

    # ------------------------------------------------------------------ stepping
    def __iter__(self) -> Iterator[Batch]:
        while (batch := self.step()) is not None:
            yield batch

    def step(self) -> Batch | None:
        """Plan and commit one engine step.

        Returns:
            The step's :class:`Batch` (never empty), or ``None`` once every request finished.
        """
        if self.allocator is not None:
            for req in self._to_free:
                self.allocator.free(req.request_id)
        self._to_free = []
        if self.is_finished:
            return None

        now = self._advance_clock()
        limits = self.limits
        chunk_cap = limits.long_prefill_chunk or limits.max_num_batched_tokens

        # 1-2. plan: decodes first, then continuing prefills, both in admission order; then KV
        # blocks, in admission order, preempting from the most recently admitted. A preemption
        # gives back its tokens and blocks, so the requests still running are planned again: one
        # left out for want of budget (a prefill behind a long decode) may run now.
        preempted: list[int] = []
        while True:
            planned, budget = self._plan(chunk_cap)
            if self.allocator is None:
                break
            before = len(preempted)
            i = 0
            while i < len(self._running):
                req = self._running[i]
                lq = planned.get(req.request_id)
                if lq is not None and not self._reserve(req, req.num_computed + lq, planned, preempted):
                    continue  # req itself was preempted; the list shifted under i
                i += 1
            if len(preempted) == before:
                break

        decodes = [r for r in self._running if r.request_id in planned and r.is_decode]
        prefills = [r for r in self._running if r.request_id in planned and not r.is_decode]

        # 3. admit waiting requests (FIFO), unless this step preempted.
        if not preempted:
            while self._waiting and len(self._running) < limits.max_num_seqs and budget > 0:
                req = self._waiting[0]
                if now is not None and req.num_preemptions == 0 and req.arrival_s > now:
                    break
                chunk = min(req.num_known, budget, chunk_cap)
                if self.allocator is not None:
                    if not self.allocator.can_allocate(req.request_id, chunk):
                        break
                    self.allocator.allocate(req.request_id, chunk)
                self._waiting.popleft()
                req.status = "running"
                self._running.append(req)
                planned[req.request_id] = chunk
                budget -= chunk
                prefills.append(req)

        assert planned, "a non-finished scheduler always schedules some request"
        return self._commit(decodes + prefills, len(decodes), planned, now, preempted)

    def _advance_clock(self) -> float | None:
        if self.step_interval_s is None:
            return None
        now = self._clock_base_s + self._clock_steps * self.step_interval_s
        if not self._running:
            head = self._waiting[0]
            if head.num_preemptions == 0 and head.arrival_s > now:
                self._clock_base_s, self._clock_steps = head.arrival_s, 0
                now = head.arrival_s
        self._clock_steps += 1
        return now

    def _plan(self, chunk_cap: int) -> tuple[dict[int, int], int]:
        """Query lengths of the running requests this step (decodes first, then continuing
        prefills, each in admission order) and the token budget left."""
        limits = self.limits
        budget = limits.max_num_batched_tokens
        planned: dict[int, int] = {}
        for req in self._running:
            if req.is_decode:
                lq = min(limits.decode_query_len, req.output_len - req.num_generated)
                if lq <= budget:
                    planned[req.request_id] = lq
                    budget -= lq
        for req in self._running:
            if budget == 0:
                break
            if not req.is_decode:
                chunk = min(req.num_known - req.num_computed, budget, chunk_cap)
                planned[req.request_id] = chunk
                budget -= chunk
        return planned, budget

    def _reserve(
        self, req: _Request, seq_len: int, planned: dict[int, int], preempted: list[int]
    ) -> bool:
        """Give ``req`` blocks for ``seq_len`` tokens, preempting from the tail.

        Returns False when ``req`` itself had to be preempted.
        """
        alloc = self.allocator
        assert alloc is not None
        while not alloc.can_allocate(req.request_id, seq_len):
            victim = self._running[-1]
            self._preempt(victim, planned, preempted)
            if victim is req:
                return False
        alloc.allocate(req.request_id, seq_len)
        return True

    def _preempt(self, req: _Request, planned: dict[int, int], preempted: list[int]) -> None:
        assert self.allocator is not None
        self.allocator.free(req.request_id)
        self._running.remove(req)
        planned.pop(req.request_id, None)
        req.status = "waiting"
        req.num_computed = 0
        req.num_preemptions += 1
        self._num_preemptions += 1
        self._waiting.appendleft(req)
        preempted.append(req.request_id)

    def _commit(
        self,
        order: list[_Request],
        num_decodes: int,
        planned: dict[int, int],
        now: float | None,
        preempted: list[int],
    ) -> Batch:
        query_lens, seq_lens, finished = [], [], []
        for idx, req in enumerate(order):
            lq = planned[req.request_id]
            if idx < num_decodes:
                req.num_generated += lq  # every draft token accepted
            elif req.num_computed + lq == req.num_known:
                req.num_generated += 1  # the prefill's last chunk samples a token
            req.num_computed += lq
            assert req.num_computed <= self.limits.max_model_len
            query_lens.append(lq)
            seq_lens.append(req.num_computed)
            if req.num_generated == req.output_len:
                req.status = "finished"
                req.finish_step = self._step
                finished.append(req.request_id)
        if finished:
            done = set(finished)
            self._to_free = [r for r in self._running if r.request_id in done]
            self._running = [r for r in self._running if r.request_id not in done]
            self._num_finished += len(finished)
        batch = Batch(
            step=self._step,
            request_ids=tuple(r.request_id for r in order),
            query_lens=tuple(query_lens),
            seq_lens=tuple(seq_lens),
            num_decodes=num_decodes,
            clock_s=now,
            finished=tuple(finished),
            preempted=tuple(preempted),
        )
        self._step += 1
        return batch
