"""The continuous-batching scheduler and the KV block allocator, on real and random traces.

Every run is checked against an independent token model (kept here, not read from the
scheduler): a prefill chunk that computes a request's last known token samples one token, a
decode of ``Lq`` tokens generates ``Lq`` tokens, a preemption drops the computed tokens, and a
request ends with ``generated == output_len`` and ``seq_len == prompt_len + output_len - 1``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from zerojit.runner.kv_blocks import BlockAllocator, OutOfBlocksError
from zerojit.runner.scheduler import Batch, Scheduler, SchedulerLimits
from zerojit.runner.trace import TraceRequest, load_trace


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def run_checked(requests, limits, *, step_interval_s=0.05, allocator=None, width=None):
    """Run a scheduler to the end, checking every invariant at every step; return the batches."""
    requests = list(requests)
    by_id = {r.request_id: r for r in requests}
    order = {r.request_id: i for i, r in enumerate(requests)}
    computed = dict.fromkeys(by_id, 0)
    generated = dict.fromkeys(by_id, 0)
    finished: set[int] = set()
    first_seen: list[int] = []
    sched = Scheduler(requests, limits, step_interval_s=step_interval_s, allocator=allocator)
    batches: list[Batch] = []
    last_clock = None
    for b in sched:
        n = len(b)
        assert b.step == len(batches)
        assert 1 <= n <= limits.max_num_seqs
        assert sched.num_running <= limits.max_num_seqs
        assert len(set(b.request_ids)) == n
        assert b.num_decodes + b.num_prefills == n
        assert b.num_tokens == sum(b.query_lens) <= limits.max_num_batched_tokens
        assert b.num_decode_tokens == sum(b.query_lens[: b.num_decodes])
        assert b.num_prefill_tokens == b.num_tokens - b.num_decode_tokens
        qsl = b.query_start_loc()
        assert len(qsl) == n + 1 and qsl[0] == 0 and qsl[-1] == b.num_tokens
        assert all(qsl[i + 1] - qsl[i] == b.query_lens[i] for i in range(n))
        if step_interval_s is None:
            assert b.clock_s is None
        else:
            assert last_clock is None or b.clock_s >= last_clock
            last_clock = b.clock_s
        for rid in b.preempted:
            assert rid not in b.request_ids
            computed[rid] = 0
        for i, (rid, q, s) in enumerate(zip(b.request_ids, b.query_lens, b.seq_lens)):
            r = by_id[rid]
            assert rid not in finished
            if rid not in first_seen:
                first_seen.append(rid)
                if step_interval_s is not None:
                    assert b.clock_s >= r.arrival_s
            assert q >= 1
            assert s == computed[rid] + q
            assert s <= limits.max_model_len
            known = r.prompt_len + generated[rid]
            in_decode = generated[rid] >= 1 and computed[rid] == known - 1
            if i < b.num_decodes:
                assert in_decode
                # full 1 + k tokens, or the shorter last decode
                assert q == min(limits.decode_query_len, r.output_len - generated[rid])
                generated[rid] += q
            else:
                assert not in_decode
                assert s <= known
                if limits.long_prefill_chunk is not None:
                    assert q <= limits.long_prefill_chunk
                if s == known:
                    generated[rid] += 1
            assert generated[rid] <= r.output_len
            computed[rid] = s
        done = {rid for rid in b.request_ids if generated[rid] == by_id[rid].output_len}
        assert set(b.finished) == done
        finished |= done
        if allocator is not None:
            owned = [allocator.blocks(rid) for rid in b.request_ids]
            for rid, s, blocks in zip(b.request_ids, b.seq_lens, owned):
                assert len(blocks) == cdiv(s, allocator.block_size)
            flat = [blk for blocks in owned for blk in blocks]
            assert len(flat) == len(set(flat))
            if allocator.reserve_null_block:
                assert 0 not in flat
            w = width or max(len(x) for x in owned)
            table = allocator.block_table(b.request_ids, w)
            assert [row[: len(x)] for row, x in zip(table, owned)] == [list(x) for x in owned]
            assert all(len(row) == w for row in table)
        batches.append(b)
    assert sched.step() is None
    assert sched.is_finished and sched.num_finished == len(requests)
    assert finished == set(by_id)
    # admission is FIFO in trace order
    assert first_seen == sorted(first_seen, key=order.__getitem__)
    for rid, r in by_id.items():
        assert generated[rid] == r.output_len
        assert computed[rid] == r.prompt_len + r.output_len - 1
        state = sched.request_state(rid)
        assert state.status == "finished"
        assert state.num_generated_tokens == r.output_len
        assert state.num_computed_tokens == r.prompt_len + r.output_len - 1
    if allocator is not None:
        assert allocator.num_free_blocks == allocator.num_usable_blocks
    return batches


# ---------------------------------------------------------------- hand-computed runs
def test_chunked_prefill_then_decodes_by_hand():
    reqs = [TraceRequest(0, 0.0, 5, 3), TraceRequest(1, 0.0, 6, 2)]
    limits = SchedulerLimits(max_num_batched_tokens=8, max_num_seqs=2, max_model_len=64)
    got = [
        (b.request_ids, b.query_lens, b.seq_lens, b.num_decodes, b.finished)
        for b in run_checked(reqs, limits, step_interval_s=None)
    ]
    assert got == [
        ((0, 1), (5, 3), (5, 3), 0, ()),  # A's whole prompt (samples token 1), B's first 3
        ((0, 1), (1, 3), (6, 6), 1, ()),  # A decodes (token 2), B finishes its prompt (token 1)
        ((0, 1), (1, 1), (7, 7), 2, (0, 1)),  # both decode their last token
    ]


def test_speculative_decode_by_hand():
    reqs = [TraceRequest(0, 0.0, 4, 6)]
    limits = SchedulerLimits(16, 4, 64, num_speculative_tokens=2)
    batches = run_checked(reqs, limits, step_interval_s=None)
    assert [(b.query_lens, b.seq_lens, b.num_decodes) for b in batches] == [
        ((4,), (4,), 0),  # prefill: token 1
        ((3,), (7,), 1),  # 1 + 2 drafts, all accepted: tokens 2-4
        ((2,), (9,), 1),  # only 2 left to generate: a shorter final decode
    ]
    assert [b.is_uniform_decode for b in batches] == [False, True, True]


def test_budget_and_max_num_seqs_bound_admission():
    reqs = [TraceRequest(i, 0.0, 3, 2) for i in range(4)]
    limits = SchedulerLimits(max_num_batched_tokens=7, max_num_seqs=3, max_model_len=16)
    got = [(b.request_ids, b.query_lens) for b in run_checked(reqs, limits, step_interval_s=None)]
    assert got[0] == ((0, 1, 2), (3, 3, 1))  # the budget cuts request 2's first chunk
    assert got[1] == ((0, 1, 2), (1, 1, 2))  # decodes first, then request 2 continues
    assert got[2] == ((2, 3), (1, 3))  # 0 and 1 finished; 3 admitted once a seat is free


def test_long_prefill_chunk_caps_each_chunk():
    reqs = [TraceRequest(0, 0.0, 10, 1), TraceRequest(1, 0.0, 3, 1)]
    limits = SchedulerLimits(64, 4, 64, long_prefill_chunk=4)
    got = [b.query_lens for b in run_checked(reqs, limits, step_interval_s=None)]
    assert got == [(4, 3), (4,), (2,)]


def test_time_jumps_to_the_next_arrival_when_idle():
    reqs = [TraceRequest(0, 0.0, 4, 1), TraceRequest(1, 10.0, 4, 1)]
    batches = run_checked(reqs, SchedulerLimits(64, 4, 64))
    assert [(b.request_ids, b.clock_s) for b in batches] == [((0,), 0.0), ((1,), 10.0)]


def test_arrival_waits_for_the_simulated_clock():
    reqs = [TraceRequest(0, 0.0, 4, 10), TraceRequest(1, 0.12, 4, 1)]
    batches = run_checked(reqs, SchedulerLimits(64, 4, 64), step_interval_s=0.05)
    admitted = next(b for b in batches if 1 in b.request_ids)
    assert admitted.step == 3 and admitted.clock_s == pytest.approx(0.15)
    # ignoring time, both start together
    assert run_checked(reqs, SchedulerLimits(64, 4, 64), step_interval_s=None)[0].request_ids == (0, 1)


def test_decode_waits_rather_than_shrinks_when_budget_is_short():
    reqs = [TraceRequest(i, 0.0, 1, 3) for i in range(3)]
    limits = SchedulerLimits(
        max_num_batched_tokens=4, max_num_seqs=3, max_model_len=16, num_speculative_tokens=1
    )
    batches = run_checked(reqs, limits, step_interval_s=None)
    for b in batches:
        assert all(q in (1, 2) for q in b.query_lens[: b.num_decodes])
    # step 1: two decodes of 2 fill the budget; request 2 (also past its prefill) waits
    assert (batches[1].request_ids, batches[1].query_lens) == ((0, 1), (2, 2))


# ---------------------------------------------------------------- the real trace
@pytest.mark.parametrize("num_speculative_tokens", [0, 2])
def test_first_200_trace_requests(num_speculative_tokens):
    trace = load_trace(limit=200, max_model_len=4096)
    assert trace.clipped > 0
    limits = SchedulerLimits(
        max_num_batched_tokens=2048,
        max_num_seqs=32,
        max_model_len=4096,
        num_speculative_tokens=num_speculative_tokens,
    )
    batches = run_checked(trace, limits)
    k1 = 1 + num_speculative_tokens
    for r in trace:
        mine = [(b, b.request_ids.index(r.request_id)) for b in batches if r.request_id in b.request_ids]
        prefill = sum(b.query_lens[i] for b, i in mine if i >= b.num_decodes)
        decodes = [b.query_lens[i] for b, i in mine if i < b.num_decodes]
        assert prefill == r.prompt_len  # no allocator: no preemption, each prompt computed once
        assert sum(decodes) == r.output_len - 1
        assert len(decodes) == cdiv(r.output_len - 1, k1)
        assert mine[-1][0].seq_lens[mine[-1][1]] == r.prompt_len + r.output_len - 1
    assert any(b.is_uniform_decode for b in batches)
    assert any(b.num_decodes and b.num_prefills for b in batches)  # mixed steps happen
    assert max(b.num_tokens for b in batches) == 2048  # the budget binds
    assert batches[-1].clock_s >= trace.duration_s


@pytest.mark.parametrize("num_speculative_tokens", [0, 2])
def test_first_200_trace_requests_with_a_small_kv_cache(num_speculative_tokens):
    trace = load_trace(limit=200, max_model_len=4096)
    limits = SchedulerLimits(2048, 32, 4096, num_speculative_tokens=num_speculative_tokens)
    allocator = BlockAllocator(num_blocks=1 + 4096 // 64 * 2, block_size=64)
    sched_batches = run_checked(trace, limits, allocator=allocator, width=4096 // 64)
    assert any(b.preempted for b in sched_batches)  # the cache is small enough to preempt


def test_runs_are_deterministic():
    trace = load_trace(limit=60, max_model_len=2048)
    limits = SchedulerLimits(512, 8, 2048, num_speculative_tokens=1)
    a = list(Scheduler(trace, limits, allocator=BlockAllocator(150, 16)))
    b = list(Scheduler(trace, limits, allocator=BlockAllocator(150, 16)))
    assert a == b


# ---------------------------------------------------------------- property test
@st.composite
def workloads(draw):
    k = draw(st.integers(0, 3))
    n = draw(st.integers(1, 10))
    arrival, reqs = 0.0, []
    for i in range(n):
        arrival += draw(st.sampled_from([0.0, 0.01, 0.05, 0.3, 2.0]))
        prompt_len = draw(st.one_of(st.integers(1, 4), st.integers(1, 40)))  # short ones too
        reqs.append(TraceRequest(i, arrival, prompt_len, draw(st.integers(1, 12))))
    max_model_len = max(r.total_len for r in reqs) + draw(st.integers(0, 5))
    limits = SchedulerLimits(
        max_num_batched_tokens=draw(st.one_of(st.integers(1 + k, 5 + k), st.integers(1 + k, 48))),
        max_num_seqs=draw(st.integers(1, 6)),
        max_model_len=max_model_len,
        num_speculative_tokens=k,
        long_prefill_chunk=draw(st.one_of(st.none(), st.integers(1, 16))),
    )
    interval = draw(st.sampled_from([None, 0.05, 0.2]))
    allocator = None
    if draw(st.booleans()):
        bs = draw(st.sampled_from([1, 2, 4, 16]))
        need = max(cdiv(r.total_len - 1, bs) for r in reqs)
        allocator = BlockAllocator(1 + need + draw(st.integers(0, 12)), bs)
    return reqs, limits, interval, allocator


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_invariants_on_random_traces(workload):
    reqs, limits, interval, allocator = workload
    batches = run_checked(reqs, limits, step_interval_s=interval, allocator=allocator)
    event("preempted" if any(b.preempted for b in batches) else "no preemption")


# ---------------------------------------------------------------- errors and values
def test_limits_report_every_bad_field():
    with pytest.raises(ValueError) as info:
        SchedulerLimits(0, 0, 1, num_speculative_tokens=-1, long_prefill_chunk=0)
    msg = str(info.value)
    for name in (
        "max_num_batched_tokens",
        "max_num_seqs",
        "max_model_len",
        "num_speculative_tokens",
        "long_prefill_chunk",
    ):
        assert name in msg
    with pytest.raises(ValueError, match="1 \\+ num_speculative_tokens"):
        SchedulerLimits(2, 1, 64, num_speculative_tokens=2)


def test_scheduler_rejects_what_it_cannot_serve():
    limits = SchedulerLimits(64, 4, 100)
    with pytest.raises(ValueError, match=r"load_trace\(\.\.\., max_model_len=100\)"):
        Scheduler([TraceRequest(0, 0.0, 90, 11)], limits)
    with pytest.raises(ValueError, match="duplicate request_id 0"):
        Scheduler([TraceRequest(0, 0.0, 1, 1), TraceRequest(0, 0.0, 1, 1)], limits)
    with pytest.raises(ValueError, match="output_len"):
        Scheduler([TraceRequest(0, 0.0, 1, 0)], limits)
    with pytest.raises(ValueError, match="usable blocks"):
        Scheduler([TraceRequest(0, 0.0, 90, 10)], limits, allocator=BlockAllocator(3, 16))
    with pytest.raises(ValueError, match="step_interval_s"):
        Scheduler([], limits, step_interval_s=0)
    assert Scheduler([], limits).step() is None


def test_batch_helpers():
    b = Batch(step=0, request_ids=(7, 3, 5), query_lens=(2, 2, 9), seq_lens=(10, 4, 9), num_decodes=2)
    assert (b.num_prefills, b.num_decode_tokens, b.num_prefill_tokens, b.num_tokens) == (1, 4, 9, 13)
    assert b.query_start_loc() == [0, 2, 4, 13]
    assert (b.max_query_len, b.max_seq_len, len(b)) == (9, 10, 3)
    assert not b.is_uniform_decode
    assert replace(b, request_ids=(7, 3), query_lens=(2, 2), seq_lens=(10, 4)).is_uniform_decode
    with pytest.raises(ValueError, match="one entry per request"):
        Batch(0, (1,), (1, 2), (1,), 0)


# ---------------------------------------------------------------- the block allocator
def test_block_allocator_hands_out_grows_and_frees_deterministically():
    a = BlockAllocator(num_blocks=6, block_size=4)
    assert a.num_usable_blocks == a.num_free_blocks == 5  # block 0 is the null block
    assert a.allocate(10, 5) == (1, 2)
    assert a.allocate(10, 8) == ()  # 8 tokens still fit 2 blocks
    assert a.allocate(11, 1) == (3,)
    assert a.allocate(10, 9) == (4,)
    assert a.blocks(10) == (1, 2, 4)
    assert a.block_table([11, 10], width=4) == [[3, 0, 0, 0], [1, 2, 4, 0]]
    assert not a.can_allocate(11, 12)
    with pytest.raises(OutOfBlocksError, match="request 11 needs 2 more KV-cache block"):
        a.allocate(11, 12)
    assert a.blocks(11) == (3,)  # all or nothing
    assert a.free(10) == 3 and a.free(10) == 0
    assert a.num_free_blocks == 4 and a.num_used_blocks == 1
    assert a.allocate(12, 16) == (5, 1, 2, 4)  # FIFO free list
    with pytest.raises(KeyError, match="owns no KV-cache block"):
        a.block_table([10], 4)
    with pytest.raises(ValueError, match="more than the table width"):
        a.block_table([12], 3)


def test_block_allocator_without_null_block_and_bad_sizes():
    a = BlockAllocator(2, 16, reserve_null_block=False)
    assert a.allocate(0, 32) == (0, 1)
    with pytest.raises(ValueError):
        BlockAllocator(1, 16)
    with pytest.raises(ValueError):
        BlockAllocator(4, 0)


def test_admission_waits_for_blocks_and_preemption_recomputes():
    # 4 usable blocks of 4 tokens. Two requests of 8 prompt tokens fill the cache after their
    # prefills; the first decode needs a third block for request 0, so request 1 (the most
    # recently admitted) is preempted and later re-prefills its prompt plus its generated token.
    reqs = [TraceRequest(0, 0.0, 8, 3), TraceRequest(1, 0.0, 8, 3), TraceRequest(2, 0.0, 4, 1)]
    a = BlockAllocator(5, 4)
    batches = run_checked(reqs, SchedulerLimits(64, 4, 16), step_interval_s=None, allocator=a)
    got = [(b.request_ids, b.query_lens, b.seq_lens, b.preempted) for b in batches]
    assert got == [
        ((0, 1), (8, 8), (8, 8), ()),  # request 2 waits: no block left for it
        ((0,), (1,), (9,), (1,)),  # 0 needs a block: 1 is preempted; nothing admitted
        ((0,), (1,), (10,), ()),  # 0 finishes; head of the queue (1) needs 3 blocks, 1 free
        ((1, 2), (9, 4), (9, 4), ()),  # 1 recomputes 8 + 1 tokens; 2 fits beside it
        ((1,), (1,), (10,), ()),
    ]


def test_a_request_that_preempts_itself_leaves_its_budget_to_the_prefill_behind_it():
    # Found by test_invariants_on_random_traces: request 7's 4-token speculative decode takes the
    # whole budget, request 6's prefill waits; 7 then lacks blocks and preempts itself, and the
    # step must still run 6 (it used to plan nothing and fail).
    reqs = [TraceRequest(i, 0.0, p, o) for i, (p, o) in enumerate([(1, 1)] * 6 + [(2, 1), (1, 9), (1, 1)])]
    limits = SchedulerLimits(max_num_batched_tokens=4, max_num_seqs=2, max_model_len=10, num_speculative_tokens=3,
                             long_prefill_chunk=1)
    batches = list(Scheduler(reqs, limits, allocator=BlockAllocator(10, 1)))
    self_preempted = next(b for b in batches if 7 in b.preempted)
    assert self_preempted.request_ids == (6,) and self_preempted.query_lens == (1,)
    assert sorted(r for b in batches for r in b.finished) == list(range(9))
