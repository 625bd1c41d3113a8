"""pytest plugin: fail a test whose body compiles a Triton kernel after the test run's warm-up.

Load it with ``-p zerojit.pytest_plugin`` (works from a source tree with nothing installed, given
``PYTHONPATH=src``) and choose a mode::

    pytest -p zerojit.pytest_plugin --jit-monitor-mode=error

The option configures the *process monitor* (:func:`zerojit.monitor.configure`); the test run's
warm-up happens in your own fixtures through ``registry.warmup()``, which installs it. Then, per
test, the compiles made while the test *body* runs (the call phase; fixtures' own compiles are not
attributed to it) are:

* ``error``: raised as :class:`~zerojit.monitor.RuntimeJitError` by the monitor, before anything
  compiles, so the test fails with the explanation. A test that swallows the error still fails:
  the plugin sees the blocked compile and fails the test with the same explanation.
* ``warn``: compiled, logged, and listed per test in a "zerojit JIT monitor" section of the
  terminal summary; the test does not fail (warn is for surveying, error for enforcing).
* ``off`` (the default): nothing.

Compiles inside :func:`zerojit.monitor.allow_compiles` and inside a later zerojit warm-up are
never counted.
"""

from __future__ import annotations

from typing import Any

import pytest

from zerojit import monitor as _monitor

_RESULTS = pytest.StashKey[list]()
_PREVIOUS = pytest.StashKey[Any]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("zerojit", "zerojit runtime JIT monitor")
    group.addoption(
        "--jit-monitor-mode",
        action="store",
        choices=_monitor.MODES,
        default=None,
        help="after the test run's zerojit warm-up: error fails a test whose body compiles a kernel, "
        "warn lists such tests in the summary, off does nothing (default: ZEROJIT_JIT_MONITOR or off)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_RESULTS] = []
    mode = config.getoption("--jit-monitor-mode", default=None)
    config.stash[_PREVIOUS] = (mode is not None, _monitor._configured)
    if mode is not None:
        _monitor.configure(mode)


def pytest_unconfigure(config: pytest.Config) -> None:
    changed, previous = config.stash.get(_PREVIOUS, (False, None))
    if changed:
        _monitor.shutdown()
        _monitor.configure(previous)


def _seen(mon: _monitor.JitMonitor | None) -> dict[Any, int]:
    if mon is None:
        return {}
    return {(id(m.compile), "m"): m.misses for m in mon.misses()} | {(id(m.compile), "d"): m.misses for m in mon.direct_compiles()}


def _new_compiles(mon: _monitor.JitMonitor | None, before: dict[Any, int]) -> list[tuple[_monitor.MissCount, int]]:
    if mon is None:
        return []
    out = []
    for tag, counts in (("m", mon.misses()), ("d", mon.direct_compiles())):
        for m in counts:
            n = m.misses - before.get((id(m.compile), tag), 0)
            if n > 0:
                out.append((m, n))
    return out


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    mon_before = _monitor.current()
    before = _seen(mon_before)
    try:
        result = yield
    except BaseException:
        _record(item, mon_before, before)  # the test fails already (usually with the RuntimeJitError)
        raise
    new = _record(item, mon_before, before)
    if new and _monitor.current().mode == "error":
        total = sum(n for _, n in new)
        text = "\n\n".join(m.compile.explain(blocked=not m.compile.direct) for m, _ in new)
        pytest.fail(
            f"the test body triggered {_count(total, 'runtime compile')} after warm-up (JIT monitor in error mode; "
            f"the RuntimeJitError was caught inside the test):\n{text}",
            pytrace=False,
        )
    return result


def _count(n: int, noun: str) -> str:
    """``"1 test"``, ``"2 tests"``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _record(item: pytest.Item, mon_before: Any, before: dict) -> list:
    mon = _monitor.current()
    new = _new_compiles(mon, before if mon is mon_before else {})
    if new:
        item.config.stash[_RESULTS].append((item.nodeid, mon.mode, new))
    return new


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    results = config.stash.get(_RESULTS, [])
    if not results:
        return
    tr = terminalreporter
    tr.section("zerojit JIT monitor")
    total = sum(n for _, _, new in results for _, n in new)
    tr.write_line(f"{_count(total, 'runtime compile')} after warm-up in {_count(len(results), 'test')}:")
    for nodeid, mode, new in results:
        for m, n in new:
            tr.write_line(f"{nodeid}: {n}x {m.compile.summary()}")
