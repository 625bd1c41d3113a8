"""zerojit's specialization model against Triton's OWN binder.

Every rule of :func:`zerojit.specialization.classify` is checked by binding the same value with
Triton 3.6's binder (``create_function_from_signature`` / ``native_specialize_impl``, reached via
:func:`zerojit.specialization.bind` under the compile-only driver) on a probe kernel whose
parameters carry each declaration Triton knows: plain, ``do_not_specialize``,
``do_not_specialize_on_alignment``, annotated ``tl.int64`` / ``tl.int32`` / ``tl.float32``,
``tl.const`` pointers and a constexpr. The expected classes are never re-derived from the rules.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

import re
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from zerojit.kernel import LaunchSpec, TritonJitKernel, kernel_launcher
from zerojit.specialization import SpecClass, WarmupTensor, bind, classify, param_classes, scalar_rep


@pytest.fixture(scope="module", autouse=True)
def co(module_compile_only_target):
    return module_compile_only_target


# The probe: one parameter per declaration Triton distinguishes. Never compiled, only bound.
@triton.jit(
    do_not_specialize=["dns", "dns64", "dns_ptr"],
    do_not_specialize_on_alignment=["dnsoa", "dnsoa_ptr"],
)
def _probe(i, dns, dnsoa, n64: tl.int64, dns64: tl.int64, n32: tl.int32, s: tl.float32,
           ptr, c_ptr: tl.const, dns_ptr, dnsoa_ptr, C: tl.constexpr):
    pass


# How each parameter is declared, in classify's words (declarations, not rules).
DECL = {
    "i": {},
    "dns": dict(do_not_specialize=True),
    "dnsoa": dict(do_not_specialize_on_alignment=True),
    "n64": dict(annotation="i64"),
    "dns64": dict(annotation="i64", do_not_specialize=True),
    "n32": dict(annotation="i32"),
    "s": dict(annotation="fp32"),
    "ptr": {},
    "c_ptr": dict(is_const=True),
    "dns_ptr": dict(do_not_specialize=True),
    "dnsoa_ptr": dict(do_not_specialize_on_alignment=True),
}
NAMES = [p.name for p in _probe.params]
NEUTRAL = dict(i=17, dns=17, dnsoa=17, n64=17, dns64=17, n32=17, s=0.5, ptr=None, c_ptr=None, dns_ptr=None,
               dnsoa_ptr=None, C=3)


def test_probe_declarations_are_what_triton_parsed():
    """The DECL table describes the probe as Triton itself parsed it (guards the test's premise)."""
    by_name = {p.name: p for p in _probe.params}
    for name, decl in DECL.items():
        p = by_name[name]
        assert p.do_not_specialize == decl.get("do_not_specialize", False), name
        assert p.do_not_specialize_on_alignment == decl.get("do_not_specialize_on_alignment", False), name
        assert (p.annotation_type or None) == decl.get("annotation"), name
        assert p.is_const == decl.get("is_const", False), name
    assert by_name["C"].is_constexpr


def _outcome(fn):
    try:
        return ("ok", fn())
    except Exception as e:  # the exception type is part of the comparison
        return ("raises", type(e))


def triton_class(name: str, value):
    """The class Triton's binder gives ``value`` at parameter ``name`` of the probe."""
    args = dict(NEUTRAL, **{name: value})
    _, spec, _ = bind(_probe, **args)
    return param_classes(_probe, spec)[name]


def assert_agrees(value):
    """classify(value) == Triton's binder at every parameter of the probe (or both raise alike)."""
    for name, decl in DECL.items():
        want = _outcome(lambda: triton_class(name, value))
        got = _outcome(lambda: classify(value, **decl))
        assert got == want, f"param {name} ({decl}), value {value!r}: zerojit {got} vs Triton {want}"


BOUNDARIES = [0, 1, -1, 2, 15, 16, 17, -16, -17, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**32, 2**32 + 1,
              2**63 - 1, 2**63, 2**63 + 16, -(2**63), -(2**63) - 1, -(2**63) + 16, 2**64 - 1, 2**64 - 16, 2**64,
              -(2**64), 2**64 + 16]
ints = st.one_of(
    st.sampled_from(BOUNDARIES),
    st.integers(-(2**64), 2**64),
    st.integers(-(2**60), 2**60).map(lambda x: x * 16),  # plenty of multiples of 16 of every width
)
HYP = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@HYP
@given(ints)
def test_ints_match_triton_binder(v):
    assert_agrees(v)


def test_int_classes_by_hand():
    """Triton's binder on the hand-picked facts the model states (also documents them)."""
    assert triton_class("i", 1) == SpecClass("constexpr", 1)
    assert triton_class("i", 64) == SpecClass("i32", "D")
    assert triton_class("i", 100) == SpecClass("i32", "")
    assert triton_class("i", 2**31) == SpecClass("i64", "D")
    assert triton_class("i", 2**63) == SpecClass("u64", "D")
    assert triton_class("dns", 1) == SpecClass("i32", None)
    assert triton_class("dns", 2**40) == SpecClass("i64", None)  # the width stays in the key
    assert triton_class("dnsoa", 1) == SpecClass("constexpr", 1)  # 1 stays a constexpr
    assert triton_class("dnsoa", 64) == SpecClass("i32", "")
    assert triton_class("n64", 1) == SpecClass("i64", 1)
    assert triton_class("n64", 5) == SpecClass("i64", "")
    assert triton_class("s", 2) == SpecClass("fp32", None)
    for v in (2**64, -(2**63) - 1):
        with pytest.raises(OverflowError):
            triton_class("i", v)
        with pytest.raises(OverflowError):
            classify(v)


@HYP
@given(st.one_of(st.booleans(), st.floats(allow_nan=True, allow_infinity=True), st.none()))
def test_bool_float_none_match_triton_binder(v):
    assert_agrees(v)


def test_bool_float_none_by_hand():
    assert classify(True) == triton_class("i", True) == SpecClass("u1", None)
    assert classify(0.5) == triton_class("i", 0.5) == SpecClass("fp32", None)
    assert classify(None) == triton_class("i", None) == SpecClass("constexpr", None)


DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8, torch.int16,
          torch.int32, torch.int64, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2]


@HYP
@given(st.sampled_from(DTYPES), st.integers(0, 17))
def test_tensors_match_triton_binder(dtype, offset):
    base = torch.zeros(64, dtype=dtype)
    assert_agrees(base[offset:])  # an offset view: aligned iff offset * itemsize % 16 == 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_tensor_alignment_by_hand(dtype):
    base = torch.zeros(64, dtype=dtype)
    assert base.data_ptr() % 16 == 0  # CPU allocations are (at least) 16-byte aligned
    ty = triton_class("ptr", base).type
    assert ty.startswith("*") and triton_class("c_ptr", base).type == "*k" + ty[1:]
    assert classify(base) == triton_class("ptr", base) == SpecClass(ty, "D")
    misaligned = base[1:]
    assert misaligned.data_ptr() % 16 != 0
    assert classify(misaligned) == triton_class("ptr", misaligned) == SpecClass(ty, "")
    step = 16 // base.element_size()
    assert classify(base[step:]) == triton_class("ptr", base[step:]) == SpecClass(ty, "D")


def test_unsupported_values_are_refused_by_both():
    z = torch.zeros(4, dtype=torch.complex64)
    with pytest.raises(Exception):
        triton_class("ptr", z)
    with pytest.raises(TypeError):
        classify(z)
    with pytest.raises(TypeError):
        classify("seq_len")


def test_constexpr_parameter_is_its_value():
    for v in (1, 16, 100, None, True, 0.5):
        _, spec, _ = bind(_probe, **dict(NEUTRAL, C=v))
        assert param_classes(_probe, spec)["C"] == SpecClass("constexpr", v)


# --- scalar_rep -------------------------------------------------------------------------------

REP_TABLE = [
    (1, 1), (64, 16), (100, 17), (16, 16), (17, 17), (0, 16), (-5, 17), (-32, 16),
    (2**31 - 1, 17), (2**31, 2**32), (2**40, 2**32), (2**40 + 3, 2**32 + 1), (-(2**31) - 1, 2**32 + 1),
    (-(2**63), 2**32), (2**63, 2**63), (2**64 - 1, 2**63 + 1),
]


@pytest.mark.parametrize("value, rep", REP_TABLE)
def test_scalar_rep_table(value, rep):
    assert scalar_rep(value) == rep
    assert type(scalar_rep(value)) is int


def test_scalar_rep_other_types_and_no_specialize():
    assert scalar_rep(True) is True and scalar_rep(False) is False
    assert scalar_rep(None) is None
    assert scalar_rep(3.25) == 0.5
    assert scalar_rep(1, specialize=False) == 17  # 1 is not special for a do_not_specialize param
    assert scalar_rep(64, specialize=False) == 17
    assert scalar_rep(2**40, specialize=False) == 2**32 + 1  # ... but the width still is
    assert scalar_rep(2**63, specialize=False) == 2**63 + 1
    with pytest.raises(TypeError):
        scalar_rep("16")


@pytest.mark.parametrize("value", [2**64, 2**64 + 5, -(2**63) - 1, -(2**64)])
def test_scalar_rep_out_of_range_names_the_value(value):
    with pytest.raises(OverflowError, match=re.escape(str(value))):
        scalar_rep(value)
    with pytest.raises(OverflowError, match=re.escape(str(value))):
        scalar_rep(value, specialize=False)


@HYP
@given(ints)
def test_scalar_rep_in_class_through_binder(v):
    assume(-(2**63) <= v < 2**64)
    rep = scalar_rep(v)
    for name in ("i", "dnsoa", "n64"):
        assert triton_class(name, rep) == triton_class(name, v), name
    rep_dns = scalar_rep(v, specialize=False)
    assert triton_class("dns", rep_dns) == triton_class("dns", v)
    assert scalar_rep(rep) == rep  # a representative represents itself
    assert scalar_rep(rep_dns, specialize=False) == rep_dns


@HYP
@given(ints, ints)
def test_scalar_rep_is_one_per_class(u, v):
    """Two values Triton puts in one class share one representative (it is *the* representative)."""
    assume(-(2**63) <= u < 2**64 and -(2**63) <= v < 2**64)
    if triton_class("i", u) == triton_class("i", v):
        assert scalar_rep(u) == scalar_rep(v)
    else:
        assert scalar_rep(u) != scalar_rep(v)
    if triton_class("dns", u) == triton_class("dns", v):
        assert scalar_rep(u, specialize=False) == scalar_rep(v, specialize=False)


# --- WarmupTensor -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("aligned", [True, False])
def test_warmup_tensor_binds_like_a_real_tensor(dtype, aligned):
    w = WarmupTensor(dtype, (8, 4), aligned=aligned)
    real = torch.zeros(64, dtype=dtype)[(0 if aligned else 1):][:32].view(8, 4)
    assert (real.data_ptr() % 16 == 0) == aligned
    for name in ("ptr", "c_ptr", "dns_ptr", "dnsoa_ptr"):
        assert triton_class(name, w) == triton_class(name, real), name
    assert triton_class("ptr", w).attr == ("D" if aligned else "")


def test_warmup_tensor_is_a_meta_tensor_with_layout():
    w = WarmupTensor(torch.float16, (4, 8), strides=(16, 1))
    assert isinstance(w, torch.Tensor)
    assert w.shape == (4, 8) and w.ndim == 2 and w.stride() == (16, 1) and w.dtype == torch.float16
    assert w.device.type == "meta" and w.is_meta
    with pytest.raises(Exception):
        w.tolist()  # no memory behind it
    assert w.data_ptr() % 16 == 0
    d = WarmupTensor(torch.int32, (3, 4, 5))
    assert d.stride() == (20, 5, 1) and d.is_contiguous()
    assert WarmupTensor(torch.int32).shape == (1,)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int8, torch.int64])
def test_warmup_tensor_unaligned(dtype):
    w = WarmupTensor(dtype, (16,), aligned=False)
    assert w.data_ptr() % 16 != 0 and w.shape == (16,) and w.stride() == (1,)
    assert classify(w).attr == ""


def test_warmup_tensor_unaligned_impossible_for_16_byte_elements():
    with pytest.raises(ValueError, match="16-byte aligned"):
        WarmupTensor(torch.complex128, (4,), aligned=False)


# --- launch options are part of Triton's key ------------------------------------------------

@triton.jit
def _copy_kernel(src_ptr, dst_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs))


class _Copy(TritonJitKernel["_Copy.CompileKey"]):
    """dst = src (16 float32 elements). Its launch options are the key: ``num_warps``, and the
    order the options reach Triton in (``stages_first``: ``num_stages`` before ``num_warps``)."""

    kernel = _copy_kernel

    @dataclass(frozen=True)
    class CompileKey:
        num_warps: int
        stages_first: bool = False

    def dispatch(self, *, num_warps: int, stages_first: bool = False) -> "_Copy.CompileKey":
        return self.CompileKey(num_warps, stages_first)

    def get_warmup_keys(self) -> list:
        return [self.CompileKey(4)]

    def warmup_inputs(self, key) -> dict:
        return dict(src=WarmupTensor(torch.float32, (16,)), dst=WarmupTensor(torch.float32, (16,)),
                    num_warps=key.num_warps, stages_first=key.stages_first)

    @kernel_launcher(host_only=("num_warps", "stages_first"))
    def __call__(self, *, src, dst, num_warps: int = 4, stages_first: bool = False) -> LaunchSpec:
        options = dict(num_stages=2, num_warps=num_warps) if stages_first else dict(num_warps=num_warps, num_stages=2)
        return LaunchSpec(grid=(1,), kwargs=dict(BLOCK=16, **options), returns=dst)


def test_num_warps_is_part_of_tritons_key(co):
    cache = _copy_kernel.device_caches[co.device][0]
    cache.clear()
    copy = _Copy()
    src, dst = torch.zeros(16), torch.zeros(16)
    copy(src=src, dst=dst, num_warps=4)
    copy(src=src, dst=dst, num_warps=8)
    assert len(cache) == 2  # same arguments, two launch options: two compiled variants
    copy(src=src, dst=dst, num_warps=8)
    assert len(cache) == 2
    _, spec4, opts4 = bind(_copy_kernel, src, dst, BLOCK=16, num_warps=4)
    _, spec8, opts8 = bind(_copy_kernel, src, dst, BLOCK=16, num_warps=8)
    assert spec4 == spec8 and opts4["num_warps"] == 4 and opts8["num_warps"] == 8
    assert sorted(v.metadata.num_warps for v in cache.values()) == [4, 8]
    assert sorted(k.count("'num_warps': 8") for k in cache) == [0, 1]


def test_launch_options_in_any_order_are_one_variant(co):
    cache = _copy_kernel.device_caches[co.device][0]
    cache.clear()
    copy = _Copy()
    copy.compile(_Copy.CompileKey(2))
    copy.compile(_Copy.CompileKey(2, stages_first=True))
    assert [(v.metadata.num_warps, v.metadata.num_stages) for v in cache.values()] == [(2, 2)]
