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

The plugin turns off the recording of misses as learned keys for the test run
(``ZEROJIT_LEARN=0``, :mod:`zerojit.learned`): recorded, a miss that failed a test would be warmed
by the next run's warm-up into the same cache folder, and a rerun (a CI retry) would pass with
nothing fixed. ``--jit-learn`` keeps the recording on.

A compile made while a fixture is set up is counted too, attributed to the fixture and to the
test that requested it (``test_x [fixture 'model']`` in the summary); in error mode it fails
that test at set-up, also when the fixture swallowed the RuntimeJitError. A compile the monitor
blocked in another thread than the test's (a worker pool, a server thread) is reported as such:
the error was raised there, where the test could not see it.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest

from zerojit import learned as _learned
from zerojit import monitor as _monitor

_RESULTS = pytest.StashKey[list]()
_PREVIOUS = pytest.StashKey[Any]()
_CURRENT = pytest.StashKey[Any]()  # the test being set up (whose fixtures are being made)
_LEARN = pytest.StashKey[Any]()  # ZEROJIT_LEARN before the run: (set, value)


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
    group.addoption(
        "--jit-learn",
        action="store_true",
        default=False,
        help="record the tests' misses as learned keys, which the next warm-up into the same cache folder "
        "warms (default: not recorded, so a test that failed for a miss fails again when rerun)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_RESULTS] = []
    mode = config.getoption("--jit-monitor-mode", default=None)
    config.stash[_PREVIOUS] = (mode is not None, _monitor._configured)
    if mode is not None:
        _monitor.configure(mode)
    if not config.getoption("--jit-learn", default=False):
        config.stash[_LEARN] = (_learned.ENV_VAR in os.environ, os.environ.get(_learned.ENV_VAR))
        os.environ[_learned.ENV_VAR] = "0"


def pytest_unconfigure(config: pytest.Config) -> None:
    changed, previous = config.stash.get(_PREVIOUS, (False, None))
    if changed:
        _monitor.shutdown()
        _monitor.configure(previous)
    was_set, value = config.stash.get(_LEARN, (None, None))
    if was_set is True:
        os.environ[_learned.ENV_VAR] = value
    elif was_set is False:
        os.environ.pop(_learned.ENV_VAR, None)


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
        _fail("the test body", new)
    return result


def _fail(who: str, new: list, inside: str = "the test") -> None:
    """Fail for compiles ``who`` triggered that no RuntimeJitError reported to the test
    (``inside``: where a RuntimeJitError raised in this thread was caught)."""
    total = sum(n for _, n in new)
    here = threading.get_ident()
    elsewhere = sorted({m.thread for m, _ in new if m.thread_id and m.thread_id != here})
    if elsewhere:
        where = (f"the RuntimeJitError was raised in thread {', '.join(map(repr, elsewhere))}, not in the test's own "
                 "thread, so the test could not see it")
    else:
        where = f"the RuntimeJitError was caught inside {inside}"
    text = "\n\n".join(m.compile.explain(blocked=not m.compile.direct) for m, _ in new)
    pytest.fail(f"{who} triggered {_count(total, 'runtime compile')} after warm-up (JIT monitor in error mode; "
                f"{where}):\n{text}", pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    item.config.stash[_CURRENT] = item
    try:
        return (yield)
    finally:
        item.config.stash[_CURRENT] = None


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: pytest.FixtureRequest):
    """Count the compiles a fixture's set-up makes, for the test being set up."""
    item = request.config.stash.get(_CURRENT, None)
    mon_before = _monitor.current()
    before = _seen(mon_before)
    label = f"{item.nodeid if item is not None else request.node.nodeid} [fixture {fixturedef.argname!r}]"
    try:
        result = yield
    except BaseException:
        _record_as(request.config, label, mon_before, before)
        raise
    new = _record_as(request.config, label, mon_before, before)
    if new and _monitor.current().mode == "error":
        _fail(f"the set-up of fixture {fixturedef.argname!r}", new, "the fixture")
    return result


def _count(n: int, noun: str) -> str:
    """``"1 test"``, ``"2 tests"``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _record(item: pytest.Item, mon_before: Any, before: dict) -> list:
    return _record_as(item.config, item.nodeid, mon_before, before)


def _record_as(config: pytest.Config, label: str, mon_before: Any, before: dict) -> list:
    mon = _monitor.current()
    new = _new_compiles(mon, before if mon is mon_before else {})
    if new:
        config.stash[_RESULTS].append((label, mon.mode, new))
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
