"""Declarative launch inputs (zerojit.inputs): every check's exact message, the order checks report
in, the facts memo (one dispatch per distinct facts, never fooled by equal values of another type),
the constexprs built from key fields, and what a malformed class raises when it is created.

Nothing here launches: the tests call ``key_for``, the declarative method behind ``__call__``
(``type(k).__call__._zerojit_method``) and the reference path; the MLA kernel tests run the same
machinery through warm-up, dry launches and the interpreter.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

import pytest
import torch
import triton
import triton.language as tl
from hypothesis import given, settings
from hypothesis import strategies as st

from zerojit.inputs import (
    INT32_MAX,
    BoolArg,
    CheckedKernel,
    IntArg,
    Let,
    Require,
    RowStrideInt32,
    TensorArg,
    checked_launcher,
)
from zerojit.kernel import KernelDefinitionError, KernelInputError, LaunchSpec
from zerojit.keyspace import choices, trace_dispatch
from zerojit.specialization import WarmupTensor

I32 = torch.int32


@triton.jit(do_not_specialize=["n", "dcp_rank"])
def _toy_kernel(x_ptr, idx_ptr, out_ptr, n, dcp_rank, RATIO: tl.constexpr, BLOCK: tl.constexpr,
                ALIGNED: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * RATIO, mask=offs < n)


class Toy(CheckedKernel["Toy.CompileKey"]):
    """A kernel whose checks use every kind of step; dispatch counts its calls."""

    kernel = _toy_kernel

    @dataclass(frozen=True)
    class CompileKey:
        ratio: int
        block: int
        aligned: bool
        num_warps: int = 4

    def __init__(self) -> None:
        self.dispatched = 0

    def dispatch(self, *, ratio: int, block: int = 64, aligned: bool = True) -> "Toy.CompileKey":
        self.dispatched += 1
        return self.CompileKey(ratio=ratio, block=block, aligned=bool(aligned))

    def extra_kwargs(self, key: "Toy.CompileKey") -> dict:
        return {"num_stages": 2}

    def get_warmup_keys(self) -> list:
        return []

    def warmup_inputs(self, key: "Toy.CompileKey") -> dict:
        return dict(self.fact_inputs(key), x=WarmupTensor(torch.float32, (8,)), idx=WarmupTensor(I32, (8, 4)),
                    n=8)

    @checked_launcher(
        TensorArg("x", 1, torch.float32),
        TensorArg("idx", 2, length="len(x)", length_of="n_x (rows of x)"),
        RowStrideInt32("idx"),
        IntArg("n", high="len(x)"),
        IntArg("ratio", 1, INT32_MAX),
        Require("block", "is_int(block) and block >= 16 and block % ratio == 0",
                "must be an int >= 16 divisible by ratio={ratio}, got {block!r}"),
        IntArg("dcp_size", 1, INT32_MAX),
        Require("dcp_rank", "is_int(dcp_rank) and 0 <= dcp_rank < dcp_size",
                "must be an int in [0, dcp_size={dcp_size}), got {dcp_rank!r}"),
        BoolArg("flag"),
        TensorArg("extra", 1, when="flag"),
        Let("aligned", "x.data_ptr() % 16 == 0"),
        host_only=("dcp_size", "flag", "extra"),
    )
    def __call__(self, key, constexprs, *, x, idx, n, ratio, block=64, dcp_size=1, dcp_rank=0, flag=False,
                 extra=None) -> LaunchSpec:
        out = torch.empty_like(x)
        return LaunchSpec(grid=(triton.cdiv(n, key.block),), kwargs=dict(constexprs, out=out), returns=out)


toy = Toy()


def good(**change) -> dict:
    inputs = dict(x=torch.zeros(8), idx=torch.zeros(8, 4, dtype=I32), n=8, ratio=4, block=64)
    inputs.update(change)
    return inputs


def problem(**change) -> str:
    with pytest.raises(KernelInputError) as e:
        Toy().key_for(**good(**change))
    return str(e.value)


# ----------------------------------------------------------------------------- messages
@pytest.mark.parametrize(
    "change, message",
    [
        (dict(x=[0.0] * 8), "toy: argument 'x': must be a torch.Tensor, got list"),
        (dict(x=torch.zeros(8, dtype=torch.float64)), "toy: argument 'x': must be torch.float32, got torch.float64"),
        (dict(x=torch.zeros(8, 1)), "toy: argument 'x': must be 1-D, got shape (8, 1)"),
        (dict(x=torch.zeros(16)[::2]), "toy: argument 'x': must be contiguous, got strides (2,)"),
        (dict(idx=torch.zeros(4, 8, dtype=I32).t()),
         "toy: argument 'idx': its last dimension must be contiguous (stride 1), got strides (1, 8)"),
        (dict(idx=torch.zeros(8, 4, dtype=I32, device="meta")), "toy: argument 'idx': is on meta, x on cpu"),
        (dict(idx=torch.zeros(7, 4, dtype=I32)), "toy: argument 'idx': must have n_x (rows of x) = 8 entries, got 7"),
        (dict(idx=WarmupTensor(I32, (8, 4), strides=(2**31, 1)), x=WarmupTensor(torch.float32, (8,))),
         "toy: argument 'idx': row stride 2147483648 does not fit int32"),
        (dict(n=9), "toy: argument 'n': must be an int in [0, 8], got 9"),
        (dict(n=True), "toy: argument 'n': must be an int in [0, 8], got True"),
        (dict(ratio=0), "toy: argument 'ratio': must be an int in [1, 2**31), got 0"),
        (dict(ratio=4.0), "toy: argument 'ratio': must be an int in [1, 2**31), got 4.0"),
        (dict(block=42), "toy: argument 'block': must be an int >= 16 divisible by ratio=4, got 42"),
        (dict(dcp_size=2, dcp_rank=2), "toy: argument 'dcp_rank': must be an int in [0, dcp_size=2), got 2"),
        (dict(flag=1), "toy: argument 'flag': must be a bool, got int"),
        (dict(flag=True), "toy: argument 'extra': must be a torch.Tensor, got NoneType"),
        (dict(flag=True, extra=torch.zeros(3)), "toy: argument 'extra': must be torch.int32, got torch.float32"),
    ],
)
def test_each_check_reports_its_exact_message(change, message):
    assert problem(**change) == message


def test_int_bounds_read_like_check_int():
    class Ints(Toy):
        @checked_launcher(TensorArg("x", 1, torch.float32), IntArg("n", low="ratio"), IntArg("ratio", 1, 10),
                          Let("aligned", "True"))
        def __call__(self, key, constexprs, *, x, idx, n, ratio, block=64):
            return LaunchSpec(grid=(0,))

    with pytest.raises(KernelInputError, match=r"^toy: argument 'n': must be an int >= 4, got 3$"):
        Ints().key_for(**good(n=3))
    with pytest.raises(KernelInputError, match=r"^toy: argument 'ratio': must be an int in \[1, 10\], got 11$"):
        Ints().key_for(**good(ratio=11, n=20))


def test_the_first_failing_check_in_order_is_reported():
    # dcp_rank is checked per launch against dcp_size, which is checked first: dcp_size is named
    assert problem(dcp_size=0) == "toy: argument 'dcp_size': must be an int in [1, 2**31), got 0"
    # several wrong inputs: the first in the listed order
    assert problem(n=-1, ratio=0, flag=3) == "toy: argument 'n': must be an int in [0, 8], got -1"
    # a check that computes with an input (block % ratio) runs after that input's own check
    assert problem(ratio=0, block=42) == "toy: argument 'ratio': must be an int in [1, 2**31), got 0"


def test_error_names_kernel_and_argument():
    with pytest.raises(KernelInputError) as e:
        toy.key_for(**good(block=8))
    assert (e.value.kernel, e.value.argument) == ("toy", "block")


# ----------------------------------------------------------------------------- memo and fast path
def test_dispatch_runs_once_per_distinct_facts():
    k = Toy()
    plan = type(k).__call__._zerojit_checked
    before = plan.slow_calls
    first = k.key_for(**good())
    for n in range(9):  # per-launch values change, the facts (ratio, block, alignment) do not
        assert k.key_for(**good(n=n, x=torch.ones(8), idx=torch.ones(8, 4, dtype=I32))) == first
    assert k.dispatched == 1 and plan.slow_calls == before + 1
    assert k.key_for(**good(ratio=2)) == Toy.CompileKey(ratio=2, block=64, aligned=True)
    assert k.dispatched == 2
    assert k.key_for(**good(x=torch.zeros(9)[1:], idx=torch.zeros(8, 4, dtype=I32))).aligned is False  # a Let fact
    assert k.dispatched == 3
    # new facts of usual inputs: checked and dispatched by the generated code, not the reference path
    assert plan.slow_calls == before + 1


def test_new_facts_failing_a_once_per_facts_check_report_what_the_reference_path_reports():
    k = Toy()
    k.key_for(**good())  # the memo exists: later new facts take the generated miss branch
    plan = type(k).__call__._zerojit_checked
    before = plan.slow_calls
    with pytest.raises(KernelInputError, match=r"^toy: argument 'block'"):
        k.key_for(**good(block=8))  # new facts, failing a check that runs once per facts
    assert plan.slow_calls == before + 1 and k.dispatched == 1


class Traced(Toy):
    """Toy over a key space: ratio 2 or 4, block 64 or 42 (42 fails ``block % ratio == 0`` at 4),
    x aligned or not."""

    def get_warmup_keys(self) -> list:
        return trace_dispatch(self.dispatch)(ratio=choices(2, 4), block=choices(64, 42), aligned=choices(True, False))


def _point_inputs(ratio: int, block: int, aligned: bool) -> dict:
    x = torch.zeros(8) if aligned else torch.zeros(9)[1:]  # (torch's allocations are 16-byte aligned)
    return good(ratio=ratio, block=block, x=x, idx=torch.zeros(8, 4, dtype=I32))


def test_the_warm_up_learns_each_traced_point_of_a_warmed_key_as_its_first_launch_would():
    """finish_warmup learns the facts of the points the key space traced (issue 33: a warmed key's
    first launch at a traced value is a memo hit): only those whose key warmed and whose
    once-per-facts checks pass; each entry is the one a launch learns (a fresh instance's, by key_for)."""
    k = Traced()
    keys = k.get_warmup_keys()
    unwarmed = Toy.CompileKey(ratio=2, block=64, aligned=True)
    k.finish_warmup([key for key in keys if key != unwarmed])
    reference = Toy()
    valid = [(r, b, a) for r in (2, 4) for b in (64, 42) for a in (True, False) if b % r == 0]
    for point in valid:
        if Toy.CompileKey(*point) != unwarmed:
            reference.key_for(**_point_inputs(*point))
    assert len(valid) == 6 and k._zerojit_facts == reference._zerojit_facts  # 5 entries: the warmed valid points
    k.dispatched = 0
    for point in valid:
        assert k.key_for(**_point_inputs(*point)) == Toy.CompileKey(*point)
    assert k.dispatched == 1  # only the key that did not warm was dispatched at its launch
    for aligned in (True, False):  # never learned: the launch checks it and says why
        with pytest.raises(KernelInputError, match="'block': must be an int >= 16 divisible by ratio=4, got 42"):
            k.key_for(**_point_inputs(4, 42, aligned))


def test_equal_facts_of_another_type_are_checked_again():
    k = Toy()
    k.key_for(**good())  # ratio=4, block=64 remembered
    with pytest.raises(KernelInputError, match="'ratio': must be an int"):
        k.key_for(**good(ratio=4.0))  # 4.0 == 4: an IntArg fact's type is tested on every launch
    with pytest.raises(KernelInputError, match="'block': must be an int >= 16"):
        k.key_for(**good(block=64.0))  # a fact checked only by a Require: its type is part of the memo key


def test_unusual_but_valid_inputs_take_the_reference_path_and_agree():
    class Four(int):
        pass

    class Mode(enum.IntEnum):
        FOUR = 4

    k = Toy()
    key = k.key_for(**good())
    plan = type(k).__call__._zerojit_checked
    for ratio in (Four(4), Mode.FOUR):
        before = plan.slow_calls
        assert k.key_for(**good(ratio=ratio)) == key
        assert plan.slow_calls == before + 1
    param = torch.nn.Parameter(torch.zeros(8), requires_grad=False)  # a tensor subclass
    assert k.key_for(**good(x=param)) == key


def test_declarative_method_builds_constexprs_once_from_key_fields():
    k = Toy()
    spec = type(k).__call__._zerojit_method(k, **good())
    # block -> BLOCK, ratio -> RATIO, aligned -> ALIGNED (upper-cased constexprs), num_warps (launch option)
    # and extra_kwargs; no other field; the rest are the body's kwargs
    assert spec.kwargs == dict(RATIO=4, BLOCK=64, ALIGNED=True, num_warps=4, num_stages=2, out=spec.returns)
    assert spec.grid == (1,)
    assert type(k).__call__._zerojit_checked.constexpr_fields == (
        ("RATIO", "ratio"), ("BLOCK", "block"), ("ALIGNED", "aligned"), ("num_warps", "num_warps"))


def test_host_only_includes_facts_that_feed_no_parameter():
    plan = type(toy).__call__._zerojit_checked
    assert set(plan.host_only) == {"dcp_size", "flag", "extra", "ratio", "block"}
    assert plan.facts == ("ratio", "block", "aligned")


def test_fact_inputs_hand_the_key_back():
    key = Toy.CompileKey(ratio=2, block=32, aligned=True)
    assert toy.fact_inputs(key) == dict(ratio=2, block=32)
    assert toy.key_for(**toy.warmup_inputs(key)) == key  # meta tensors: only metadata is read


def test_unhashable_fact_is_dispatched_every_time():
    class Listy(Toy):
        @checked_launcher(TensorArg("x", 1, torch.float32), Let("aligned", "True"))
        def __call__(self, key, constexprs, *, x, idx, n, ratio, block=64):
            return LaunchSpec(grid=(0,))

    k = Listy()
    k.key_for(**good(ratio=[4]))
    k.key_for(**good(ratio=[4]))
    assert k.dispatched == 2


@settings(max_examples=200, deadline=None)
@given(
    n=st.sampled_from([-1, 0, 3, 8, 9, 2**40, 8.0, True, None]),
    ratio=st.sampled_from([0, 1, 4, 8, 2**31, 4.0, False, "4"]),
    block=st.sampled_from([8, 16, 42, 64, 2**33, 64.0, None]),
    dcp=st.sampled_from([(1, 0), (2, 1), (2, 2), (0, 0), (3, -1), (2, 1.0)]),
    flag=st.sampled_from([False, True, 0]),
    x_len=st.sampled_from([8, 7]),
)
def test_generated_checks_agree_with_the_reference_path(n, ratio, block, dcp, flag, x_len):
    """Whatever the inputs, the generated checks and the plain reference path give one outcome."""
    inputs = good(n=n, ratio=ratio, block=block, dcp_size=dcp[0], dcp_rank=dcp[1], flag=flag, x=torch.zeros(x_len))
    plan = type(toy).__call__._zerojit_checked

    def outcome(run):
        try:
            return run()
        except KernelInputError as e:
            return str(e)

    fast = outcome(lambda: Toy().key_for(**inputs))
    values = tuple(inputs.get(name, default) for name, default in plan.inputs)
    reference = outcome(lambda: plan.slow(Toy(), values)[0])
    assert fast == reference


# ----------------------------------------------------------------------------- class creation
def _define(checks=(), body_params="self, key, constexprs, *, x, idx, n, ratio, block=64", dispatch=None,
            kernel=_toy_kernel):
    namespace: dict = {}
    exec(f"def body({body_params}):\n    return None\n", namespace)
    checks = (*checks, Let("aligned", "True")) if dispatch is None else checks
    attrs = {"kernel": kernel, "__call__": checked_launcher(*checks)(namespace["body"])}
    if dispatch is not None:
        attrs["dispatch"] = dispatch
    return type("Bad", (Toy,), attrs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(checks=(TensorArg("x", 1, when="n > 0"),)), "the first TensorArg ('x') gives the device"),
        (dict(checks=(IntArg("m"),)), "IntArg('m') names no input of __call__"),
        (dict(checks=(Require("n", "n < limit", "too big"),)), "reads ['limit']"),
        (dict(checks=(Require("n", "n > 0", "got {nn}"),)), "reads ['nn']"),
        (dict(checks=(Let("n", "1"),)), "Let('n') shadows an input"),
        (dict(dispatch=lambda self, *, ratio, tile: None), "dispatch takes 'tile', which is neither an input"),
        (dict(checks=(TensorArg("x", 1),), dispatch=lambda self, *, x: None), "dispatch takes the tensor 'x'"),
    ],
)
def test_malformed_classes_are_refused_when_created(kwargs, message):
    with pytest.raises(KernelDefinitionError, match=re.escape(message)):
        _define(**kwargs)


@pytest.mark.parametrize("kernel, shown", [(42, "int 42"), ("_toy_kernel", "str '_toy_kernel'"),
                                           (_toy_kernel.fn, "function <function _toy_kernel")])
def test_a_kernel_attribute_that_is_no_triton_function_is_named(kernel, shown):
    """``kernel = 42`` (or the name, or the undecorated Python function): refused when the class
    is created, naming the class and what it holds (was an AttributeError on ``.fn``)."""
    with pytest.raises(KernelDefinitionError, match=re.escape(f"Bad.kernel is {shown}") + ".*: set it to a "
                       + re.escape("@triton.jit function (or a triton.autotune / triton.heuristics of one)")):
        _define(kernel=kernel)


def test_malformed_steps_are_refused_when_written():
    with pytest.raises(KernelDefinitionError, match="bad check expression 'n >'"):
        Require("n", "n >", "x")
    with pytest.raises(KernelDefinitionError, match="ndim must be an int >= 1"):
        TensorArg("x", 0)
    # dtype=None (meaning "any dtype") once passed here and then refused every launch: "must be None, got torch.float16"
    for bad in (None, (torch.float16, torch.bfloat16), "float32"):
        with pytest.raises(KernelDefinitionError, match=r"dtype must be one torch\.dtype, got .*Require"):
            TensorArg("x", 1, bad)
    with pytest.raises(KernelDefinitionError, match="is not a check"):
        checked_launcher("x")
    with pytest.raises(KernelDefinitionError, match=r"def __call__\(self, key, constexprs, \*, inputs...\)"):
        checked_launcher()(lambda self, *, x: None)


def test_a_key_field_naming_two_parameters_is_refused():
    @triton.jit
    def _two_kernel(x_ptr, idx_ptr, n, aligned: tl.constexpr, ALIGNED: tl.constexpr):
        pass

    message = "CompileKey.aligned names two parameters ['aligned', 'ALIGNED']"
    with pytest.raises(KernelDefinitionError, match=re.escape(message)):
        _define(checks=(TensorArg("x", 1, torch.float32),), kernel=_two_kernel)


def test_a_one_key_kernel_whose_dispatch_takes_no_facts():
    """A kernel with one compile key (``dispatch(self)``, an empty ``CompileKey``): created, and
    every launch gets that key, the facts memo keyed by ``()`` (was a SyntaxError at creation)."""
    @triton.jit
    def _one_kernel(x_ptr, BLOCK: tl.constexpr):
        pass

    class One(CheckedKernel["One.CompileKey"]):
        kernel = _one_kernel

        @dataclass(frozen=True)
        class CompileKey:
            pass

        def dispatch(self):
            return self.CompileKey()

        def get_warmup_keys(self):
            return [self.CompileKey()]

        @checked_launcher(TensorArg("x", 1, torch.float32))
        def __call__(self, key, constexprs, *, x):
            return LaunchSpec(grid=(1,), kwargs=dict(constexprs, BLOCK=16), returns=x)

    one = One()
    assert One.__call__._zerojit_checked.memo_key == "()"
    assert one.key_for(x=torch.empty(3)) == One.CompileKey() == one.key_for(x=torch.empty(5))
    with pytest.raises(KernelInputError, match="argument 'x': must be torch.float32, got torch.int32"):
        one.key_for(x=torch.empty(3, dtype=I32))


def test_checked_launcher_needs_a_checked_kernel():
    from zerojit.kernel import TritonJitKernel

    # Python 3.11 wraps an error raised in __set_name__ in a RuntimeError; 3.12 raises it as is
    with pytest.raises((KernelDefinitionError, RuntimeError)) as e:
        class Plain(TritonJitKernel):
            kernel = _toy_kernel

            @checked_launcher()
            def __call__(self, key, constexprs, *, x):
                pass
    error = e.value if isinstance(e.value, KernelDefinitionError) else e.value.__cause__
    assert "decorates __call__ of a CheckedKernel subclass" in str(error)


def test_scale_adds_scale_must_be_a_float_tritons_fp32_argument():
    """An int, a tensor or None as ``scale`` would launch another signature than the warmed one
    (a compile at run time); the example's checks name the argument instead, before any launch."""
    from zerojit.examples.scale_add import ScaleAdd

    k = ScaleAdd()
    x = torch.zeros(64)
    inputs = dict(x=x, bias=torch.zeros(16), out=torch.zeros(64), period=16)
    assert k.key_for(**inputs, scale=0.5) == ScaleAdd.CompileKey(period_class=16, block=256, x_aligned=True)
    for bad, shown in ((2, "int"), (None, "NoneType"), (torch.tensor(0.5), "Tensor"), ("a", "str")):
        with pytest.raises(KernelInputError, match=rf"^scale_add: argument 'scale': must be a float, got {shown}$"):
            k.key_for(**inputs, scale=bad)


def test_the_guides_several_dtypes_pattern_keys_each_dtype_and_refuses_another():
    """docs/migrating-a-kernel.md, "One kernel, several dtypes": the class the guide shows, read
    from the guide itself, keys fp16 and bf16 apart (each its warmed key), refuses fp32 naming
    the argument, and its warm-up inputs dispatch to their own key."""
    import pathlib

    guide = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "migrating-a-kernel.md").read_text()
    section = guide.split("### One kernel, several dtypes", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]

    @triton.jit(do_not_specialize=["n"])
    def _double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)

    namespace = dict(CheckedKernel=CheckedKernel, Let=Let, Require=Require, checked_launcher=checked_launcher,
                     LaunchSpec=LaunchSpec, choices=choices, trace_dispatch=trace_dispatch, WarmupTensor=WarmupTensor,
                     dataclass=dataclass, torch=torch, triton=triton, _double_kernel=_double_kernel,
                     __name__=__name__)  # (dataclass reads the module of the class)
    exec(compile(code, "docs/migrating-a-kernel.md", "exec"), namespace)
    double = namespace["Double"]()
    keys = double.get_warmup_keys()
    assert [(k.dtype, k.block) for k in keys] == [("float16", 256), ("bfloat16", 256)]
    for key, dtype in zip(keys, (torch.float16, torch.bfloat16)):
        x = torch.empty(8, dtype=dtype)
        assert double.key_for(x=x, out=torch.empty_like(x)) == key
        assert double.key_for(**double.warmup_inputs(key)) == key
    with pytest.raises(KernelInputError) as e:
        double(x=torch.empty(8), out=torch.empty(8))
    assert str(e.value) == "double: argument 'x': must be a float16 or bfloat16 tensor, got torch.float32"
    with pytest.raises(KernelInputError, match=r"^double: argument 'out': must be a tensor like x \(torch.float16"):
        double(x=torch.empty(8, dtype=torch.float16), out=torch.empty(8, dtype=torch.bfloat16))
