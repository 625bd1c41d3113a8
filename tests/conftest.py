"""Test-session set-up shared by every test file.

Triton decides at decoration time whether a kernel is interpreted, so the suite runs as two
pytest processes (see tests/run.sh): one with ``TRITON_INTERPRET=1`` that runs only tests marked
``interpreter`` (kernel correctness on CPU tensors), and one without it that runs the rest
(specialization, key spaces, compile-only warm-up and dry launches). Tests marked ``gpu`` need
CUDA and are skipped without it.
"""

from __future__ import annotations

import os

import pytest

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def pytest_configure(config):
    """Give the session its own Triton home (``TRITON_HOME``): Triton's default cache folder and
    what zerojit remembers per Triton install live under it, so no test reads or writes the
    user's ``~/.triton`` (and a warm one there cannot change what a test sees)."""
    import tempfile

    config._zerojit_home = tempfile.mkdtemp(prefix="zerojit-tests-home-")
    config._zerojit_saved_home = os.environ.get("TRITON_HOME")
    os.environ["TRITON_HOME"] = config._zerojit_home


def pytest_unconfigure(config):
    import shutil

    home = getattr(config, "_zerojit_home", None)
    if home is None:
        return
    if config._zerojit_saved_home is None:
        os.environ.pop("TRITON_HOME", None)
    else:
        os.environ["TRITON_HOME"] = config._zerojit_saved_home
    shutil.rmtree(home, ignore_errors=True)


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    for item in items:
        is_interp = item.get_closest_marker("interpreter") is not None
        (keep if is_interp == INTERPRET else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    if not _has_cuda():
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in items:
            if item.get_closest_marker("gpu") is not None:
                item.add_marker(skip)


@pytest.fixture
def compile_only_target(tmp_path, monkeypatch):
    """Compile-only mode for ``cuda:90`` with a fresh Triton cache directory for this test."""
    from triton import knobs

    from zerojit.compile_only import compile_only

    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / "triton-cache"))
    with compile_only("cuda:90") as drv:
        yield drv


@pytest.fixture(scope="module")
def module_compile_only_target(tmp_path_factory):
    """Compile-only mode for ``cuda:90`` for a whole test module, with a fresh Triton cache
    directory for the module (its tests share what they compile)."""
    from triton import knobs

    from zerojit.compile_only import compile_only

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(knobs.cache, "dir", str(tmp_path_factory.mktemp("triton-cache")))
        with compile_only("cuda:90") as drv:
            yield drv
