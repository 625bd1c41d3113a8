"""A wrapped kernel's user mistakes, each refused or explained in one line (a fresh user's trial
of docs/migrating-a-kernel.md section 12): a tuning file edited by hand (a nested tuning key, a
bool for a config, a word for milliseconds, one key given twice), ``TuningPolicy('error')``
naming a config, an autotune ``key=`` naming no parameter, a heuristic that reads tensor data,
and a tuning step's failure named as such (it was "listing its keys")."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import torch
import triton
import triton.language as tl

from zerojit.autotune import TuningFileError, TuningPolicy, load_tuning_file, save_tuning_file
from zerojit.kernel import KernelDefinitionError, LaunchSpec, TritonJitKernel, kernel_launcher
from zerojit.registry import JitWarmupRegistry
from zerojit.reports import WarmupError
from zerojit.specialization import WarmupTensor

CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((32, 1), (64, 2))]


@triton.jit(do_not_specialize=["n"])
def _copy_jit(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def _kernel_class(*, key=("n",), even=lambda a: a["n"] % 64 == 0, name="copy_tuned", prune=None):
    wrapped = triton.heuristics({"EVEN": even})(triton.autotune(CONFIGS, key=list(key), prune_configs_by=prune)(_copy_jit))

    class Copy(TritonJitKernel["Copy.CompileKey"]):
        kernel = wrapped

        @dataclass(frozen=True)
        class CompileKey:
            n: int

        def dispatch(self, *, n: int) -> "Copy.CompileKey":
            return self.CompileKey(n)

        def get_warmup_keys(self) -> list:
            return [self.CompileKey(64)]

        def warmup_inputs(self, key) -> dict:
            return dict(x=WarmupTensor(torch.float32, (key.n,)), out=WarmupTensor(torch.float32, (key.n,)), n=key.n)

        @kernel_launcher
        def __call__(self, *, x, out, n) -> LaunchSpec:
            return LaunchSpec(lambda meta: (triton.cdiv(n, meta["BLOCK"]),), {}, out)

    Copy.name = name
    return Copy


def _edited_file(tmp_path, edit) -> tuple[str, dict]:
    kernel = _kernel_class()()
    header = kernel.tuning_header()
    path = str(tmp_path / "t.json")
    save_tuning_file(path, header, CONFIGS, [((64, "torch.float32", "torch.float32"), 1, 0.25)])
    doc = json.loads(open(path).read())
    edit(doc["entries"])
    with open(path, "w") as f:
        json.dump(doc, f)
    return path, header


@pytest.mark.parametrize("edit, why", [
    (lambda es: es[0].update(key=[[64], "torch.float32", "torch.float32"]), "[[64], "),  # was: TypeError unhashable
    (lambda es: es[0].update(config=True), "'config': True"),  # was: taken as config 1
    (lambda es: es[0].update(ms="fast"), "'ms': 'fast'"),
    (lambda es: es.append(dict(es[0], config=0)), "key [64, 'torch.float32', 'torch.float32'] is given twice"),
], ids=["nested key", "bool config", "word for ms", "key twice"])
def test_a_hand_edited_tuning_file_is_refused_naming_its_entries(compile_only_target, tmp_path, edit, why):
    path, header = _edited_file(tmp_path, edit)
    with pytest.raises(TuningFileError) as e:
        load_tuning_file(path, header, CONFIGS)
    assert e.value.field == "entries" and why in str(e.value)


def test_an_unedited_tuning_file_still_reads(compile_only_target, tmp_path):
    path, header = _edited_file(tmp_path, lambda es: es.append({"key": [128, "torch.float32", "torch.float32"],
                                                                  "config": 0, "ms": None}))
    assert load_tuning_file(path, header, CONFIGS) == {(64, "torch.float32", "torch.float32"): 1,
                                                      (128, "torch.float32", "torch.float32"): 0}


def test_a_damaged_tuning_file_fails_the_warm_up_as_tuning_not_as_listing_keys(compile_only_target, tmp_path):
    cls = _kernel_class(name="copy_damaged_file")
    kernel = cls()
    save_tuning_file(kernel.tuning_file(), kernel.tuning_header(), CONFIGS, [((64, "torch.float32", "torch.float32"), 1, 0.2)])
    doc = json.loads(open(kernel.tuning_file()).read())
    doc["entries"][0]["key"] = [[64]]
    with open(kernel.tuning_file(), "w") as f:
        json.dump(doc, f)
    registry = JitWarmupRegistry()
    with registry.activate():
        kernel.register_warmup()
    with pytest.raises(WarmupError) as e:
        registry.warmup(progress=False, workers=1)
    [failure] = e.value.report.failures
    assert (failure.kernel, failure.key, failure.stage) == ("copy_damaged_file", None, "finish")
    assert str(e.value).splitlines()[0] == "zerojit warm-up failed for 1 kernel's tuning:"
    assert str(failure).startswith("copy_damaged_file: finishing its warm-up (tuning): TuningFileError: ")
    assert e.value.report.to_dict()["failures"][0]["stage"] == "finish"


def test_the_error_policy_naming_a_config_is_refused():
    with pytest.raises(ValueError, match=r"^TuningPolicy\(untuned='error', config=1\): the 'error' policy chooses no "):
        TuningPolicy("error", config=1)
    assert TuningPolicy("error").config is None


def test_an_autotune_key_naming_no_parameter_is_refused_at_class_creation():
    from zerojit.triton_compat import VERSION

    if VERSION >= (3, 9):  # Triton 3.9's autotune refuses it itself, before zerojit sees the kernel
        with pytest.raises(ValueError, match="key contains names that are not kernel arguments: nope"):
            _kernel_class(key=("n", "nope"))
    else:  # 3.6-3.8 drop it from the tuning key without a word
        with pytest.raises(KernelDefinitionError, match=r"autotune key 'nope' names no kernel parameter \(Triton "
                                                        r"would leave it out of the tuning key\)"):
            _kernel_class(key=("n", "nope"))
    assert _kernel_class(key=("n",))._wrapping.tunes  # (the same class with its key right is fine)


def test_a_heuristic_that_reads_tensor_data_is_named_with_the_meta_tensor_rule(compile_only_target):
    cls = _kernel_class(even=lambda a: bool((a["x_ptr"] > 0).all()), name="copy_reads_data")
    registry = JitWarmupRegistry()
    with registry.activate():
        cls().register_warmup()
    report = registry.warmup(progress=False, workers=1, raise_on_failure=False)
    assert report.failures and all(f.kernel == "copy_reads_data" for f in report.failures)
    for f in report.failures:  # one per autotune config: each names the heuristic and the rule
        assert f.error.endswith("(heuristic 'EVEN' read tensor data: a warm-up launches with meta tensors "
                                "(WarmupTensor), which hold none; derive it from shape, dtype or strides)"), f.error
    x = torch.ones(4)  # at run time the exception is Triton's own (same type and message), the name attached
    with pytest.raises(Exception) as e:
        cls()._wrapping.resolve(dict(x_ptr=torch.empty(4, device="meta"), out_ptr=x, n=4), lambda k, s, named: 0)
    assert getattr(e.value, "zerojit_heuristic") == "EVEN"


def test_a_heuristic_over_a_pruning_autotuner_that_reads_tensor_data_is_named_when_listing_keys(compile_only_target):
    """Over a pruning autotuner the heuristics above it run while the keys are listed (the prune
    functions see their values): that failure names the heuristic and the rule too."""
    cls = _kernel_class(even=lambda a: bool((a["x_ptr"] > 0).all()), name="copy_reads_data_pruned",
                        prune={"early_config_prune": lambda configs, nargs, **kwargs: configs})
    registry = JitWarmupRegistry()
    with registry.activate():
        cls().register_warmup()
    report = registry.warmup(progress=False, workers=1, raise_on_failure=False)
    [failure] = report.failures
    assert failure.key is None and failure.error.endswith(
        "(heuristic 'EVEN' read tensor data: a warm-up launches with meta tensors (WarmupTensor), which hold none; "
        "derive it from shape, dtype or strides)"), failure.error
