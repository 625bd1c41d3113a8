"""Key-space lint (issue 20, DESIGN.md point 13): class-creation checks, warm-up self-checks,
growth at run time, a monitor that keeps its place in Triton's hook chain, and hints that say
what to change. Each test asserts the message text a user acts on."""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

import re
from dataclasses import dataclass

import triton
import triton.language as tl

from zerojit.kernel import JitKernel, KernelDefinitionError, LaunchSpec, TritonJitKernel, kernel_launcher


@triton.jit(do_not_specialize=["num_tokenz"])
def _typo_kernel(out_ptr, num_tokens, BLOCK: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, BLOCK), num_tokens)


@triton.jit(do_not_specialize_on_alignment=[7])
def _bad_index_kernel(out_ptr, num_tokens, BLOCK: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, BLOCK), num_tokens)


@triton.jit(do_not_specialize=["BLOCK"])
def _constexpr_listed_kernel(out_ptr, num_tokens, BLOCK: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, BLOCK), num_tokens)


@triton.jit(do_not_specialize_on_alignment=[2])
def _constexpr_by_index_kernel(out_ptr, num_tokens, BLOCK: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, BLOCK), num_tokens)


@triton.jit(do_not_specialize=["num_tokens"], do_not_specialize_on_alignment=[0])
def _good_kernel(out_ptr, num_tokens, BLOCK: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, BLOCK), num_tokens)


def _class_over(jit_fn):
    class Fill(TritonJitKernel):
        kernel = jit_fn

        @dataclass(frozen=True)
        class CompileKey:
            block: int

        @kernel_launcher
        def __call__(self, *, out, num_tokens) -> LaunchSpec:
            return LaunchSpec(grid=(1,), kwargs=dict(BLOCK=16))

    return Fill


def test_do_not_specialize_typo_is_refused_naming_the_parameters():
    with pytest.raises(KernelDefinitionError) as e:
        _class_over(_typo_kernel)
    assert str(e.value) == (
        "Fill: do_not_specialize names 'num_tokenz', which is no parameter of kernel "
        "_typo_kernel(out_ptr, num_tokens, BLOCK); Triton ignores it, so the parameter meant is still "
        "specialized: spell it as a parameter")


def test_do_not_specialize_on_alignment_index_out_of_range_is_refused():
    with pytest.raises(KernelDefinitionError, match=re.escape(
            "do_not_specialize_on_alignment names 7, which is no parameter of kernel "
            "_bad_index_kernel(out_ptr, num_tokens, BLOCK)")):
        _class_over(_bad_index_kernel)


@pytest.mark.parametrize("jit_fn, option", [(_constexpr_listed_kernel, "do_not_specialize"),
                                            (_constexpr_by_index_kernel, "do_not_specialize_on_alignment")])
def test_a_constexpr_listed_as_not_specialized_is_refused(jit_fn, option):
    with pytest.raises(KernelDefinitionError) as e:
        _class_over(jit_fn)
    assert f"{option} names 'BLOCK', a tl.constexpr parameter of kernel {jit_fn.fn.__name__}(out_ptr, " \
           "num_tokens, BLOCK)" in str(e.value)
    assert f"drop it from {option}, or make 'BLOCK' a plain parameter" in str(e.value)


def test_valid_hints_by_name_and_index_pass():
    assert _class_over(_good_kernel).name == "good"


def test_host_only_name_the_launcher_does_not_take_names_its_inputs():
    with pytest.raises(KernelDefinitionError) as e:
        class Fill(TritonJitKernel):
            kernel = _good_kernel

            @kernel_launcher(host_only=("num_tokenz",))
            def __call__(self, *, out, num_tokens) -> LaunchSpec: ...
    assert ("host_only names unknown inputs ['num_tokenz']; the launcher's inputs are (out, num_tokens): "
            "list only those") in str(e.value)


def test_compile_key_must_be_hashable_by_value():
    with pytest.raises(KernelDefinitionError, match=re.escape(
            "Bad.CompileKey must be hashable and compared by value: use @dataclass(frozen=True) without eq=False")):
        class Bad(JitKernel):
            @dataclass(frozen=True, eq=False)
            class CompileKey:
                a: int

    with pytest.raises(KernelDefinitionError, match=re.escape(
            "Listy.CompileKey field 'blocks' is typed list[int], which is not hashable: use a tuple or a frozenset")):
        class Listy(JitKernel):
            @dataclass(frozen=True)
            class CompileKey:
                blocks: list[int]

    with pytest.raises(KernelDefinitionError, match=re.escape(
            "Loose.CompileKey must be a frozen dataclass: decorate it with @dataclass(frozen=True)")):
        class Loose(JitKernel):
            @dataclass
            class CompileKey:
                a: int

    class Fine(JitKernel):
        @dataclass(frozen=True)
        class CompileKey:
            blocks: tuple[int, ...]
            name: str = "x"

    assert hash(Fine.CompileKey((1, 2)))


# --------------------------------------------------------------------------- 2. warm-up checks itself
import torch  # noqa: E402
from triton import knobs  # noqa: E402

from zerojit.compile_only import compile_only  # noqa: E402
from zerojit.keyspace import KeySpaceError, choices, int_range, trace_dispatch  # noqa: E402
from zerojit.registry import JitWarmupRegistry  # noqa: E402
from zerojit.specialization import WarmupTensor, scalar_rep  # noqa: E402


@pytest.fixture
def co(tmp_path):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(knobs.cache, "dir", str(tmp_path / "triton-cache"))
        with compile_only("cuda:90") as drv:
            yield drv


@triton.jit
def _tile_kernel(out_ptr, num_tokens, BLOCK: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, BLOCK), num_tokens)


class Tile(TritonJitKernel["Tile.CompileKey"]):
    """The key holds the tile; the launcher dispatches it from the token count it is given."""

    kernel = _tile_kernel
    rep_slip = False  # True: warmup_inputs feeds scalar_rep(tile) where the tile itself was meant

    @dataclass(frozen=True)
    class CompileKey:
        tile: int

    def dispatch(self, *, tile: int) -> "Tile.CompileKey":
        return self.CompileKey(tile=tile)

    def get_warmup_keys(self, *, tiles=(16, 2048)) -> list:
        return trace_dispatch(self.dispatch)(tile=choices(*tiles))

    def warmup_inputs(self, key) -> dict:
        return dict(out=WarmupTensor(torch.float32, (key.tile,)), num_tokens=scalar_rep(64),
                    tile=scalar_rep(key.tile) if self.rep_slip else key.tile)

    @kernel_launcher(host_only=("tile",))
    def __call__(self, *, out, num_tokens, tile) -> LaunchSpec:
        key = self.dispatch(tile=tile)
        return LaunchSpec(grid=(1,), kwargs=dict(BLOCK=key.tile))


def test_warmup_launch_that_dispatches_another_key_fails_that_key(co):
    slip = Tile()
    slip.rep_slip = True
    with pytest.raises(KernelDefinitionError) as e:
        slip.compile(Tile.CompileKey(2048))
    assert str(e.value).startswith(
        "tile: the warm-up launch of key Tile.CompileKey(tile=2048) dispatched key Tile.CompileKey(tile=16): "
        "field 'tile' differs (warmed 2048, the launch dispatched 16). warmup_inputs(key) must give inputs that "
        "dispatch to the key being warmed")
    assert "scalar_rep(v) stands for v's specialization class, not for v" in str(e.value)

    reg = JitWarmupRegistry()
    with reg.activate():
        slip.register_warmup()
    report = reg.warmup(progress=False, raise_on_failure=False)
    (failure,) = report.failures  # 16 dispatches 16 (scalar_rep(16) == 16): only 2048 fails, with the others
    assert failure.key == Tile.CompileKey(2048)
    assert "KernelDefinitionError: tile: the warm-up launch of key Tile.CompileKey(tile=2048)" in str(failure)
    assert "field 'tile' differs (warmed 2048, the launch dispatched 16)" in failure.error
    assert [v.key for v in report.variants] == [Tile.CompileKey(16)]


def test_a_warmup_whose_inputs_dispatch_the_key_compiles(co):
    assert Tile().compile(Tile.CompileKey(32)).key == Tile.CompileKey(32)


def test_key_space_over_the_budget_is_refused_with_each_axis_size():
    with pytest.raises(KeySpaceError) as e:
        trace_dispatch(Tile().dispatch)(tile=int_range(1, 65537))
    assert str(e.value) == (
        "tile: the declared key space gives more than 4096 keys (axes: tile 65536 = 65536 points); an axis that "
        "large is usually a per-request value in the key: pass it to a do_not_specialize parameter or bucket it "
        "in dispatch; if every key is meant, set key_budget on the kernel class or pass "
        "trace_dispatch(..., budget=N)")
    with pytest.raises(KeySpaceError, match=r"more than 8 keys \(axes: tile 9 = 9 points\)"):
        trace_dispatch(Tile().dispatch, budget=8)(tile=int_range(1, 10))

    class Wide(Tile):
        key_budget = 70_000

    assert len(trace_dispatch(Wide().dispatch)(tile=int_range(1, 65537))) == 65536
