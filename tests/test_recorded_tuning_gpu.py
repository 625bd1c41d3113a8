"""Issue 30's must-show on a GPU: an autotuned kernel whose module makes no hardware probe
(``zerojit.examples.tuned_scale``'s ``tuned_scale_kernel``, launched raw) recorded with no GPU
(``CUDA_VISIBLE_DEVICES=`` and ``--target cuda:90``: the manifest holds its tuning keys' launches
and no choice), then exec'd on the GPU: its recorded tuning keys are tuned at warm-up (on
buffers of the recorded layout, with the autotuner's own benchmark), the program runs with 0
compiles and 0 benchmarks (error mode: either would end it), an unrecorded size gets the default
policy, and every output is bit-equal to the kernel's own call (the ``triton.jit`` function
launched with the config the autotuner ran forced). A second exec reads the choices from the
tuning file instead of tuning.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import triton

SRC = str(Path(__file__).resolve().parents[1] / "src")

# The program: each size once, x = arange(n) * 0.37 scaled by 2.0 (or copied for "c" sizes); it
# saves every output and the config the autotuner ran (best_config) to argv[1].
APP = textwrap.dedent("""
    import sys
    import torch
    import triton
    from zerojit.examples.tuned_scale import tuned_scale_kernel

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tuner = tuned_scale_kernel.fn  # the autotuner under the heuristics
    ran = []
    for word in sys.argv[2:]:
        n = int(word.rstrip("c"))
        x = torch.arange(n, dtype=torch.float32, device=device) * 0.37
        out = torch.empty_like(x)
        scale = None if word.endswith("c") else 2.0
        tuned_scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n, scale)
        ran.append((word, out.cpu(), tuner.best_config.all_kwargs()))
    torch.save(ran, sys.argv[1])
""")

RECORDED = ("1000", "4096", "100000c")
UNRECORDED = ("3000", "50000c")


def _run(tmp: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zerojit", *args], cwd=tmp, env=env, capture_output=True, text=True,
                          timeout=500)


@pytest.mark.gpu
def test_compile_only_recording_tuned_at_gpu_warmup_then_zero_compiles_zero_benchmarks_bit_equal(tmp_path):
    from zerojit.examples.tuned_scale import tuned_scale_kernel

    (tmp_path / "app.py").write_text(APP)
    env = dict(os.environ, PYTHONPATH=SRC, TRITON_CACHE_DIR=str(tmp_path / "cache"),
               TRITON_HOME=str(tmp_path / "home"))
    env.pop("ZEROJIT_JIT_MONITOR", None)
    rec = _run(tmp_path, "record", "--target", "cuda:90", "--report", "-o", "m.json", "--", "python", "app.py",
               "rec.pt", *RECORDED, env={**env, "CUDA_VISIBLE_DEVICES": ""})  # no GPU while recording
    assert rec.returncode == 0, rec.stdout + rec.stderr
    assert "tuning: 3 tuning key(s) of 1 autotuned kernel(s) hold no choice" in rec.stdout, rec.stdout
    tunings = json.loads((tmp_path / "m.json").read_text())["kernels"][0]["tunings"]
    assert [t["config"] for t in tunings] == [None] * 3 and all("launch" in t for t in tunings)

    def execute(tag: str) -> tuple[subprocess.CompletedProcess, dict]:
        done = _run(tmp_path, "exec", "--manifest", "m.json", "--jit-monitor-mode", "error", "--no-progress",
                    "--json", f"{tag}.json", "--", "python", "app.py", f"{tag}.pt", *RECORDED, *UNRECORDED, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        return done, json.loads((tmp_path / f"{tag}.json").read_text())

    first, data = execute("first")
    assert "3 recorded tuning key(s) with no choice tuned at warm-up (3 benchmarked now, 0 from tuning files)" \
        in first.stderr, first.stderr
    assert (data["runtime_compiles"], data["blocked"], data["benchmarks"]) == (0, 0, 0)
    assert data["launches"] == len(RECORDED) + len(UNRECORDED)
    assert "2 tuning key(s) untuned (neither recorded nor tuned at warm-up): default policy" in first.stderr
    print("TUNED-EXEC", first.stderr.strip().splitlines()[-3:], flush=True)

    second, data = execute("second")  # the next start: the tuning file, nothing benchmarked at warm-up either
    assert "(0 benchmarked now, 3 from tuning files)" in second.stderr, second.stderr
    assert (data["runtime_compiles"], data["blocked"], data["benchmarks"]) == (0, 0, 0)

    # warmup --manifest into another cache folder tunes the same keys into its tuning file
    warm = _run(tmp_path, "warmup", "--manifest", "m.json", "--no-progress",
                env={**env, "TRITON_CACHE_DIR": str(tmp_path / "cache2")})
    assert warm.returncode == 0, warm.stdout + warm.stderr
    assert "3 recorded tuning key(s) with no choice tuned at warm-up (3 benchmarked now, 0 from tuning files)" \
        in warm.stdout, warm.stdout
    assert list((tmp_path / "cache2" / "zerojit-tuning").glob("zerojit.examples.tuned_scale.tuned_scale_kernel-*.json"))

    jit_fn = tuned_scale_kernel.fn.fn
    for tag in ("first", "second"):
        for word, out, config in torch.load(tmp_path / f"{tag}.pt"):
            n = int(word.rstrip("c"))
            x = torch.arange(n, dtype=torch.float32, device="cuda") * 0.37
            want = torch.empty_like(x)
            scale = None if word.endswith("c") else 2.0
            jit_fn[(triton.cdiv(n, config["BLOCK"]),)](x, want, n, scale, HAS_SCALE=scale is not None, **config)
            assert torch.equal(out, want.cpu()), (tag, word, config)
