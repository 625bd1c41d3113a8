"""zerojit's one door to Triton's private surfaces (``zerojit.triton_compat``), on the installed
Triton (3.6 to 3.9; CI runs this file on each).

Every check compares with Triton itself: the key ``bind`` computes is the one ``JITFunction.run``
files its compile under, a ``CompiledKernel`` zerojit builds has the fields Triton's has, and so
on. The last test holds the rule that no other zerojit module reaches a private surface.
"""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton import knobs

from zerojit import triton_compat as tc
from zerojit.compile_only import compile_only
from zerojit.kernel import KernelDefinitionError, LaunchSpec, TritonJitKernel, kernel_launcher
from zerojit.registry import JitWarmupRegistry
from zerojit.specialization import WarmupTensor

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "zerojit"


@triton.jit
def _twice_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


@triton.jit
def _keyword_only_kernel(x_ptr, out_ptr, *, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


class Twice(TritonJitKernel["Twice.CompileKey"]):
    """``out = 2 * x`` over ``n`` elements, one key per block size."""

    kernel = _twice_kernel
    fast_path = True

    @dataclass(frozen=True)
    class CompileKey:
        block: int

    def get_warmup_keys(self) -> list:
        return [self.CompileKey(32)]

    def warmup_inputs(self, key) -> dict:
        return dict(x=WarmupTensor(torch.float32, (100,)), out=WarmupTensor(torch.float32, (100,)), n=100,
                    block=key.block)

    @kernel_launcher(host_only=("block",))
    def __call__(self, *, x, out, n: int, block: int = 32) -> LaunchSpec:
        return LaunchSpec(grid=(triton.cdiv(n, block),), kwargs=dict(BLOCK=block), returns=out)


def keyword_only_class() -> type:
    """Twice's launcher over a kernel whose ``n`` and ``BLOCK`` are keyword-only parameters
    (Triton 3.9 compiles them and its binder takes them by keyword only)."""

    class KeywordOnly(Twice):
        kernel = _keyword_only_kernel

    return KeywordOnly


def warmed(kernel) -> object:
    registry = JitWarmupRegistry()
    with registry.activate():
        kernel.register_warmup()
    return registry.warmup(progress=False)


@pytest.fixture(autouse=True)
def co(tmp_path, monkeypatch):
    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / "cache"))
    with compile_only("cuda:90") as drv:
        yield drv


@pytest.fixture
def on_fast_path(co):
    """A warmed :class:`Twice` and inputs of its warmed key, for which the fast path selects a variant."""
    kernel = Twice()
    warmed(kernel)
    x, out = torch.zeros(100), torch.zeros(100)
    assert kernel.select_variant(x=x, out=out, n=100) is not None
    return kernel, x, out


def _args():
    x, out = torch.zeros(100), torch.zeros(100)
    return (x, out, 100), {"BLOCK": 32}


def test_the_version_is_in_the_supported_range():
    assert tc.TRITON_VERSION == triton.__version__ and (3, 6) <= tc.VERSION <= (3, 9)
    assert tc._minor("3.10.0+git1234") == (3, 10) and tc._minor("3.6.0") == (3, 6)


def test_another_triton_version_is_refused_at_import_naming_the_range():
    code = ("import triton; triton.__version__ = '3.10.0'\n"
            "try:\n    import zerojit.triton_compat\nexcept ImportError as e:\n    print(type(e).__name__, e)")
    env = dict(os.environ, PYTHONPATH=str(SRC.parent))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120).stdout
    assert out.startswith("UnsupportedTritonError zerojit supports Triton 3.6 to 3.9") and "Triton 3.10.0" in out


def test_bind_gives_the_key_tritons_run_files_its_compile_under(co):
    args, kw = _args()
    compiled = _twice_kernel.run(*args, grid=(4,), warmup=True, **kw)
    _, specialization, options = tc.bind(_twice_kernel, *args, **kw)
    key = tc.in_process_key(specialization, options)
    assert tc.kernel_cache(_twice_kernel, co.device)[key] is compiled
    assert tc.find_in_process_key(_twice_kernel, compiled) == key == tc.find_in_process_key(_twice_kernel, compiled,
                                                                                              co.device)
    assert set(tc.RUN_OPTIONS) <= set(options)  # 3.9: fpsan_homomorphic_casts too
    assert ("fpsan_homomorphic_casts" in options) == (tc.VERSION >= (3, 9))


@pytest.mark.skipif(tc.VERSION < (3, 7), reason="Triton 3.7's custom pipeline key")
def test_a_stages_inspection_hook_joins_the_key_and_turns_the_fast_path_off(on_fast_path, monkeypatch):
    kernel, x, out = on_fast_path

    def hook(*args):  # 3.7: no arguments -> (key, hash) for the keys; else the stages
        return ("zerojit-test-pipeline", 1234) if not args else None

    monkeypatch.setattr(knobs.runtime, "add_stages_inspection_hook", hook)
    _, specialization, options = tc.bind(_twice_kernel, x, out, 100, BLOCK=32)
    assert specialization[-1] == '("custom_pipeline", 1234)'
    assert len(tc.param_specialization(_twice_kernel, specialization)) == 4
    assert tc.stages_hook_fingerprint() == repr(("zerojit-test-pipeline", 1234))
    assert kernel.select_variant(x=x, out=out, n=100) is None  # Triton's key has the pipeline: normal path


@pytest.mark.skipif(tc.VERSION < (3, 9), reason="Triton 3.9's fpsan_homomorphic_casts option")
def test_the_fast_path_key_follows_tritons_fpsan_option(on_fast_path, monkeypatch):
    kernel, x, out = on_fast_path
    monkeypatch.setattr(knobs.compilation, "fpsan_homomorphic_casts", True)  # another in-process key
    assert kernel.select_variant(x=x, out=out, n=100) is None


def test_hook_arguments_give_the_compile_request(co, monkeypatch):
    seen = []

    def hook(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
        seen.append((tc.hook_jit_function(fn), tc.hook_compile_request(compile), tc.hook_compile_options(compile)))
        return True  # Triton skips the compile

    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", hook)
    args, kw = _args()
    _twice_kernel.run(*args, grid=(4,), warmup=True, num_warps=2, **kw)
    [(fn, request, options)] = seen
    assert fn is _twice_kernel and request.device == co.device
    assert request.signature == {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    assert request.constants == {(3,): 32} and options["num_warps"] == 2


def test_a_compiled_kernel_zerojit_builds_has_tritons_fields(co):
    args, kw = _args()
    made = _twice_kernel.run(*args, grid=(4,), warmup=True, **kw)
    fn, signature, constants, attrs = tc.source_of(made)
    group = tc.compiled_files(made)
    asm = tc.AsmDict({"cubin": made.asm["cubin"]})
    built = tc.new_compiled_kernel(jit_fn=fn, src=(signature, constants, attrs), metadata=made.metadata,
                                   metadata_group=group, asm=asm, backend=tc.backend_for(made.metadata.target, {}))
    assert set(vars(built)) == set(vars(made))  # 3.9: _module_pid
    assert (built.hash, built.name, built.kernel, built.packed_metadata) == (made.hash, made.name, made.kernel,
                                                                             made.packed_metadata)
    assert built.src.hash() == made.src.hash() and built.module is None
    assert tc.read_group_file(os.path.join(os.path.dirname(next(iter(group.values()))),
                                           tc.group_file_name(tc.metadata_file_name(fn)))) == group


def test_filing_a_variant_never_replaces_a_live_entry():
    cache, first, second = {}, object(), object()
    assert tc.file_compiled(cache, "k", first) is first
    assert tc.file_compiled(cache, "k", second) is first and cache == {"k": first}  # 3.8 would unload it


def test_a_warm_up_inside_tritons_async_compile_mode_gets_the_compiled_kernel(co):
    from triton.runtime._async_compile import AsyncCompileMode

    kernel = Twice()
    kernel.kernel.device_caches.clear()
    with ThreadPoolExecutor(1) as pool, AsyncCompileMode(pool):
        variant = kernel.compile(Twice.CompileKey(32))  # 3.7: a FutureKernel sits in the cache meanwhile
    assert not tc.is_pending(variant.compiled) and tc.resolved(variant.compiled) is variant.compiled
    assert tc.kernel_cache(kernel.kernel, co.device)[variant.triton_key] is variant.compiled


@pytest.mark.skipif(not tc.KEYWORD_ONLY_PARAMETERS, reason="Triton 3.9 compiles keyword-only parameters")
def test_keyword_only_parameters_warm_up_and_launches_hit(co):
    assert tc.positional_parameters(_keyword_only_kernel) == 2 and tc.positional_parameters(_twice_kernel) == 4
    kernel = keyword_only_class()()
    report = warmed(kernel)
    x, out = torch.zeros(100), torch.zeros(100)
    assert kernel.select_variant(x=x, out=out, n=100).triton_key == report.variants[0].triton_key
    kernel.fast_path = False
    kernel(x=x, out=out, n=100)  # the normal path: Triton's run, by keyword where 3.9 wants it
    assert list(tc.kernel_cache(kernel.kernel, co.device)) == [report.variants[0].triton_key]


@pytest.mark.skipif(tc.KEYWORD_ONLY_PARAMETERS, reason="before Triton 3.9")
def test_before_triton_3_9_a_keyword_only_parameter_is_refused_at_class_creation():
    with pytest.raises(KernelDefinitionError, match=r"keyword-only parameters \['n', 'BLOCK'\].*Triton 3.9 can"):
        keyword_only_class()


def test_a_variadic_kernel_parameter_is_refused():
    @triton.jit
    def _star_kernel(x_ptr, *rest):
        pass

    with pytest.raises(KernelDefinitionError, match=r"variadic parameter \(\*rest\)"):
        class Star(TritonJitKernel):
            kernel = _star_kernel

            @kernel_launcher
            def __call__(self, *, x) -> LaunchSpec:
                return LaunchSpec(grid=(1,))


_tuned = triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2)], key=["n"])(
    triton.heuristics({"BLOCK": lambda args: 64})(_twice_kernel))


def test_raw_launch_surfaces_see_through_autotune_and_heuristics(co):
    """unwrap_jit_function and wrapped_config_kwargs look through Triton's wrappers; wrap_run sees every
    raw launch (also the autotuner's) and unwrap_run restores Triton's run; patch_run_everywhere
    restores the class's run."""
    assert tc.unwrap_jit_function(_tuned) is _twice_kernel and tc.unwrap_jit_function(object()) is None
    assert tc.wrapped_config_kwargs(_tuned) == [_tuned.configs[0].all_kwargs()] and tc.wrapped_config_kwargs(_twice_kernel) is None
    assert tc.jit_identity(_twice_kernel) == (__name__, "_twice_kernel")
    assert tc.ordered_constexpr_parameters(_twice_kernel) == ("BLOCK",)
    seen = []

    def make(original):
        def run(*args, grid, warmup, **kwargs):
            seen.append(warmup)
            return original(*args, grid=grid, warmup=warmup, **kwargs)

        return run

    x = torch.zeros(64)
    tc.wrap_run(_twice_kernel, make)
    try:
        assert tc.wrapped_run(_twice_kernel)
        _twice_kernel[(1,)](x, x, 64, BLOCK=64)  # a dry launch: compile_only turns it into warmup=True
        _tuned[(1,)](x, x, 64)
    finally:
        tc.unwrap_run(_twice_kernel)
    assert seen == [False, False] and not tc.wrapped_run(_twice_kernel) and "run" not in vars(_twice_kernel)
    before = tc.JITFunction.run
    restore = tc.patch_run_everywhere(make)
    assert tc.JITFunction.run is not before
    restore()
    assert tc.JITFunction.run is before


def test_no_other_module_reaches_a_private_triton_surface():
    """Triton's private modules and the private fields zerojit moved behind triton_compat are
    used nowhere else in src (code, not docs: read with ``ast``)."""
    private_attrs = {"device_caches", "_init_handles", "launcher_cls", "jit_cache_hook", "jit_post_compile_hook",
                     "add_stages_inspection_hook", "kernel_load_start_hook", "kernel_load_end_hook", "manager_class",
                     "knobs", "jit_function"}  # (Triton's triton_key lives in triton.runtime: an import)
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "triton_compat.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            where = f"{path.relative_to(SRC)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Import):
                found += [f"{where} import {a.name}" for a in node.names
                          if a.name.startswith("triton.") and a.name != "triton.language"]
            elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("triton"):
                if node.module != "triton.language" and (node.module != "triton" or
                                                         any(a.name != "language" for a in node.names)):
                    found.append(f"{where} from {node.module} import {', '.join(a.name for a in node.names)}")
            elif isinstance(node, ast.Attribute) and node.attr in private_attrs:
                found.append(f"{where} .{node.attr}")
    assert found == []
