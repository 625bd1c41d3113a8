"""Helpers shared by the MLA kernel tests: launch recording, the warm-up coverage check of the
compile-only tests, comparing outputs, checking a bad input's error, the property tests'
Hypothesis settings, and copying inputs to a GPU.

The compile-only helpers reach the tests as fixtures of this folder's ``conftest.py``, bound to
the test's ``compile_only_target``; the others are imported from this sibling module
(``from _support import to_cuda``: this folder has no ``__init__.py``, so pytest's default
``prepend`` import mode puts it on ``sys.path``).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator

import pytest
import torch
from hypothesis import HealthCheck, settings

from zerojit.kernel import KernelInputError, set_launch_observer

__all__ = ["LaunchRecorder", "assert_equal_outputs", "assert_warmup_covers", "dry_launches", "gpu_examples",
           "input_error", "on_cuda", "slow_examples", "to_cuda"]


class LaunchRecorder:
    """Records the compiled variant of every zerojit launch in its ``with`` block, through the
    launch observer (the monitor's hook); the observer installed before it still sees them.

    Attributes:
        hits: the compiled variants, in launch order.
        seen: per kernel name, ``{id(compiled): compiled}`` of the variants its launches used.
    """

    def __enter__(self) -> "LaunchRecorder":
        self.hits: list[Any] = []
        self.seen: dict[str, dict[int, Any]] = {}
        self._prev = set_launch_observer(self)
        return self

    def __call__(self, kernel, compiled) -> None:
        self.hits.append(compiled)
        self.seen.setdefault(kernel.name, {})[id(compiled)] = compiled
        if self._prev is not None:
            self._prev(kernel, compiled)

    def __exit__(self, *exc) -> None:
        set_launch_observer(self._prev)


@contextmanager
def dry_launches(kernel, *, drv) -> Iterator[LaunchRecorder]:
    """Record the block's launches and assert, on leaving it, that none compiled.

    Compiling shows as growth of ``kernel``'s in-process Triton cache for ``drv``'s device (the
    compile-only target). That cache lives as long as the process: growth counts, not size.
    """
    cache = kernel.kernel.device_caches[drv.device][0]
    before = len(cache)
    with LaunchRecorder() as rec:
        yield rec
    assert len(cache) == before, f"{kernel.name}: {len(cache) - before} runtime compile(s) after warm-up"


@contextmanager
def assert_warmup_covers(kernel, report, *, drv) -> Iterator[LaunchRecorder]:
    """Around the dry launches of runtime-shaped calls after a warm-up; asserts on leaving the
    block that no call compiled, every call hit a variant of ``kernel`` that ``report`` lists,
    and every such variant was hit (no dead warm-up key)."""
    with dry_launches(kernel, drv=drv) as rec:
        yield rec
    warmed = {id(v.compiled) for v in report.variants if v.kernel == kernel.name}
    hit = set(rec.seen.get(kernel.name, {}))
    assert hit <= warmed, f"{kernel.name}: a runtime call hit a variant this warm-up did not list"
    dead = [v.key for v in report.variants if v.kernel == kernel.name and id(v.compiled) not in hit]
    assert not dead, f"{kernel.name}: warmed keys no runtime call reached: {dead}"


def assert_equal_outputs(got, want) -> None:
    """``got`` and ``want``, sequences of tensors, are as long and equal pair by pair: dtype, shape
    and every value (both shown on a mismatch)."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g, w)
        assert torch.equal(g, w), f"\n got {g.tolist()}\nwant {w.tolist()}"


def input_error(launch: Callable, inputs: dict, *, kernel: str, argument: str) -> KernelInputError:
    """Assert that ``launch(**inputs)`` raises a :class:`KernelInputError` whose ``kernel`` and
    ``argument`` are these, its message naming both; return the error (for more checks)."""
    with pytest.raises(KernelInputError) as e:
        launch(**inputs)
    assert e.value.kernel == kernel and e.value.argument == argument
    assert kernel in str(e.value) and repr(argument) in str(e.value)
    return e.value


def to_cuda(value):
    """``value`` on the GPU with the same strides and storage offset (views stay views)."""
    if not isinstance(value, torch.Tensor):
        return value
    flat = torch.tensor([], dtype=value.dtype).set_(value.untyped_storage())
    return flat.cuda().as_strided(value.size(), value.stride(), value.storage_offset())


def on_cuda(inputs: dict) -> dict:
    """``inputs`` with each tensor copied to the GPU by :func:`to_cuda`, other values as they are."""
    return {k: to_cuda(v) for k, v in inputs.items()}


def slow_examples(max_examples: int, *suppress: HealthCheck) -> settings:
    """Hypothesis settings of a kernel property test: ``max_examples`` cases, no deadline, and the
    too-slow health check (and ``suppress``) off, since each case builds tensors and launches."""
    return settings(max_examples=max_examples, deadline=None, suppress_health_check=[HealthCheck.too_slow, *suppress])


def gpu_examples(max_examples: int) -> Callable:
    """Decorator of a GPU property test, over its ``@given``: ``pytest.mark.gpu`` and
    :func:`slow_examples` of ``max_examples`` cases."""
    examples = slow_examples(max_examples)
    return lambda test: pytest.mark.gpu(examples(test))
