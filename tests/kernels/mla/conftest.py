"""Fixtures of the MLA kernel tests: the compile-only checks of ``_support``, bound to the test's
``compile_only_target`` (requesting one puts the test in compile-only mode for ``cuda:90``)."""

from __future__ import annotations

import functools

import pytest

import _support


@pytest.fixture
def dry_launches(compile_only_target):
    """``with dry_launches(kernel) as rec:`` records the block's launches (``rec.hits``, in order;
    ``rec.seen``, per kernel name) and asserts on leaving it that none compiled."""
    return functools.partial(_support.dry_launches, drv=compile_only_target)


@pytest.fixture
def assert_warmup_covers(compile_only_target):
    """``with assert_warmup_covers(kernel, report):`` around runtime-shaped calls after a warm-up
    asserts on leaving that none compiled and each variant of ``kernel`` in ``report`` was hit."""
    return functools.partial(_support.assert_warmup_covers, drv=compile_only_target)
