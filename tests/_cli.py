"""The zerojit command line as the tests run it: ``python -m zerojit ARGS`` in a child process of
this interpreter, importing this checkout's ``src``, with its own Triton cache and no
``TRITON_INTERPRET`` (the CLI compiles) or ``ZEROJIT_JIT_MONITOR`` of the test run's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def run_zerojit(args, cache, cwd, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``zerojit ARGS`` in ``cwd`` with ``TRITON_CACHE_DIR=cache`` (and ``env``'s variables);
    its output captured as text."""
    env = {**os.environ, **(env or {}), "TRITON_CACHE_DIR": str(cache), "PYTHONPATH": str(SRC)}
    env.pop("TRITON_INTERPRET", None)
    env.pop("ZEROJIT_JIT_MONITOR", None)
    return subprocess.run([sys.executable, "-m", "zerojit", *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def fresh_module(text: str, prefix: str, folder, monkeypatch):
    """``text`` as a module of a new name (``PREFIX_<random>``) in ``folder``, put on ``sys.path``
    (undone by ``monkeypatch``) and imported: importable by name, as a program's kernel modules
    are. The caller drops it from ``sys.modules`` when done (its name: ``module.__name__``)."""
    import importlib
    import uuid

    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    (Path(folder) / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(folder))
    return importlib.import_module(name)
