"""zerojit.loading.load_all: a warm start's kernels loaded on several threads, each on the warm-up's
device, every result in order (reference: a serial loop over the same kernels), one kernel's
refusal its own, Triton's module-load hooks honoured in the caller's thread, and the setting checked.
No GPU here: the load itself is a stand-in that records where it ran."""

from __future__ import annotations

import contextvars
import threading

import pytest
import torch

from zerojit import loading
from zerojit import triton_compat as tc

_MARK = contextvars.ContextVar("mark", default=None)


class _Kernel:
    def __init__(self, n: int) -> None:
        self.n = n


@pytest.fixture
def loads(monkeypatch):
    """Each stand-in load records (kernel number, thread, CUDA device set on that thread, context mark)."""
    device_of: dict[int, int] = {}
    seen: list[tuple] = []
    lock = threading.Lock()

    def set_device(device):
        device_of[threading.get_ident()] = device

    def load(compiled):
        with lock:
            seen.append((compiled.n, threading.get_ident(), device_of.get(threading.get_ident()), _MARK.get()))
        if compiled.n % 5 == 3:
            raise RuntimeError(f"cuFuncLoad failed for kernel {compiled.n}")

    monkeypatch.setattr(torch.cuda, "set_device", set_device)
    monkeypatch.setattr(tc, "load_compiled", load)
    return seen


def test_kernels_load_on_threads_on_the_device_in_order_with_each_error_its_own(loads, monkeypatch):
    monkeypatch.setenv(loading.LOAD_THREADS_ENV, "3")
    kernels = [_Kernel(n) for n in range(10)]
    token = _MARK.set("warm-up")
    try:
        done = loading.load_all(kernels, 2)
    finally:
        _MARK.reset(token)
    assert [str(e) if e else None for e, _ in done] == [
        f"cuFuncLoad failed for kernel {n}" if n % 5 == 3 else None for n in range(10)]
    assert all(seconds >= 0 for _, seconds in done)
    assert sorted(n for n, *_ in loads) == list(range(10))
    threads = {t for _, t, _, _ in loads}
    assert 1 <= len(threads) <= 3 and threading.get_ident() not in threads  # (a pool thread may take two shares)
    assert {d for _, _, d, _ in loads} == {2}  # each thread set the warm-up's device first
    assert {m for *_, m in loads} == {"warm-up"}  # in a copy of the caller's context


@pytest.mark.parametrize("setting", ["1", None])
def test_one_thread_or_load_hooks_load_in_the_callers_thread(loads, monkeypatch, setting):
    if setting is None:  # a module-load hook runs where Triton's own load would run it
        monkeypatch.setattr(tc, "load_hooks_set", lambda: True)
    else:
        monkeypatch.setenv(loading.LOAD_THREADS_ENV, setting)
    done = loading.load_all([_Kernel(n) for n in range(4)], 0)
    assert [e is None for e, _ in done] == [True, True, True, False]
    assert [(n, t, d) for n, t, d, _ in loads] == [(n, threading.get_ident(), None) for n in range(4)]


@pytest.mark.parametrize("value", ["0", "-2", "four", "1.5", "+2", "1_0", "\u0663"])
def test_a_bad_setting_is_named(monkeypatch, value):
    monkeypatch.setenv(loading.LOAD_THREADS_ENV, value)
    with pytest.raises(loading.LoadSettingError) as info:
        loading.load_threads()
    assert str(info.value) == f"ZEROJIT_LOAD_THREADS={value!r}: use a whole number >= 1"


def test_load_hooks_set_reads_tritons_hook_chains(monkeypatch):
    from triton import knobs

    assert tc.load_hooks_set() is False  # Triton's empty chains
    calls = []
    tc.add_load_hooks(calls.append, calls.append)
    try:
        assert tc.load_hooks_set() is True
    finally:
        tc.remove_load_hooks(calls.append, calls.append)
    assert tc.load_hooks_set() is False
    monkeypatch.setattr(knobs.runtime, "kernel_load_start_hook", lambda *a: None)
    assert tc.load_hooks_set() is True
