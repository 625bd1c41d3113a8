"""Key-space declarations: ``trace_dispatch`` over axes, zip groups, ``when``; its errors.

Expected key lists are written out by hand (or, for the property test, built by plain nested
loops), never by calling the same helpers the implementation uses.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

import re
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from zerojit.kernel import JitKernel
from zerojit.keyspace import Choices, KeySpaceError, choices, int_range, trace_dispatch, zip_inputs


@dataclass(frozen=True)
class K:
    a: object = None
    b: object = None
    c: object = None


class Toy(JitKernel[K]):
    """A config-free kernel with no Triton function: dispatch just records its inputs."""

    name = "toy_kernel"
    CompileKey = K

    def __init__(self):
        self.calls = []

    def dispatch(self, *, a, b=None, c=None) -> K:
        self.calls.append((a, b, c))
        return K(a, b, c)


def test_axes_are_a_cartesian_product_in_declaration_order():
    toy = Toy()
    keys = trace_dispatch(toy.dispatch)(a=choices(1, 2), b=choices("x", "y", "z"))
    assert keys == [K(1, "x"), K(1, "y"), K(1, "z"), K(2, "x"), K(2, "y"), K(2, "z")]
    keys = trace_dispatch(toy.dispatch)(b=choices("x", "y"), a=choices(1, 2))
    assert keys == [K(1, "x"), K(2, "x"), K(1, "y"), K(2, "y")]  # the first axis varies slowest


def test_scalars_are_fixed():
    toy = Toy()
    assert trace_dispatch(toy.dispatch)(a=7, b=choices(1, 2), c="fixed") == [K(7, 1, "fixed"), K(7, 2, "fixed")]
    assert trace_dispatch(toy.dispatch)(a=(1, 2)) == [K((1, 2))]  # a tuple is a scalar, not an axis


def test_zip_group_rows_vary_together():
    toy = Toy()
    g = zip_inputs(dict(a=1, b=10), dict(a=2, b=20))
    keys = trace_dispatch(toy.dispatch)(g, c=choices("p", "q"))
    assert keys == [K(1, 10, "p"), K(1, 10, "q"), K(2, 20, "p"), K(2, 20, "q")]
    assert K(1, 20, "p") not in keys and K(2, 10, "q") not in keys


def test_two_zip_groups_multiply():
    toy = Toy()
    keys = trace_dispatch(toy.dispatch)(
        zip_inputs(dict(a=1), dict(a=2)), zip_inputs(dict(b=3, c=4), dict(b=5, c=6))
    )
    assert keys == [K(1, 3, 4), K(1, 5, 6), K(2, 3, 4), K(2, 5, 6)]


def test_when_filters_points():
    toy = Toy()
    seen = []

    def when(a, b, **rest):
        seen.append((a, b, rest))
        return a != b

    keys = trace_dispatch(toy.dispatch)(a=choices(1, 2, 3), b=choices(1, 2), when=when)
    assert keys == [K(1, 2), K(2, 1), K(3, 1), K(3, 2)]
    assert len(seen) == 6 and seen[0] == (1, 1, {})
    assert (1, 1, None) not in toy.calls  # a filtered point is never dispatched


def test_keys_dedup_in_first_seen_order():
    class Mod(JitKernel[K]):
        CompileKey = K

        def dispatch(self, *, x):
            return K(x % 3)

    m = Mod()
    assert trace_dispatch(m.dispatch)(x=int_range(0, 10)) == [K(0), K(1), K(2)]
    assert trace_dispatch(m.dispatch)(x=int_range(9, -1, -1)) == [K(0), K(2), K(1)]  # 9, 8, 7 first
    assert trace_dispatch(m.dispatch)(x=choices(5, 5, 4)) == [K(2), K(1)]


def test_int_range_and_choices_values():
    assert int_range(0, 10, 3) == Choices((0, 3, 6, 9))
    assert tuple(int_range(5, 0, -2)) == (5, 3, 1)
    assert len(int_range(4, 4)) == 0
    assert list(choices("a", 2)) == ["a", 2]
    with pytest.raises(KeySpaceError, match="step"):
        int_range(0, 4, 0)


def test_empty_axis_or_group_gives_no_keys():
    toy = Toy()
    assert trace_dispatch(toy.dispatch)(a=choices(), b=choices(1, 2)) == []
    assert trace_dispatch(toy.dispatch)(zip_inputs(), a=1) == []
    assert toy.calls == []


def test_dispatch_with_var_keywords_takes_any_input():
    def dispatch(**inputs):
        return tuple(sorted(inputs.items()))

    assert trace_dispatch(dispatch)(u=choices(1, 2), v=0) == [(("u", 1), ("v", 0)), (("u", 2), ("v", 0))]


# --- errors -----------------------------------------------------------------------------------

def test_zip_rows_with_different_inputs():
    with pytest.raises(KeySpaceError, match=r"row 1 names \['a', 'c'\] but row 0 names \['a', 'b'\]"):
        zip_inputs(dict(a=1, b=2), dict(a=1, c=2))
    with pytest.raises(KeySpaceError):
        zip_inputs(dict(a=1, b=2), dict(a=1))


def test_input_given_twice():
    toy = Toy()
    with pytest.raises(KeySpaceError, match=r"toy_kernel: input 'a' is given twice"):
        trace_dispatch(toy.dispatch)(zip_inputs(dict(a=1, b=2)), a=choices(1, 2))
    with pytest.raises(KeySpaceError, match=r"'b' is given twice \(zip group 0 and zip group 1\)"):
        trace_dispatch(toy.dispatch)(zip_inputs(dict(b=1)), zip_inputs(dict(b=2, c=3)))


def test_axis_the_dispatch_does_not_take():
    toy = Toy()
    with pytest.raises(KeySpaceError, match=r"toy_kernel: dispatch takes no input named 'blocksize'"):
        trace_dispatch(toy.dispatch)(a=1, blocksize=choices(16, 32))
    with pytest.raises(KeySpaceError, match="'d'"):
        trace_dispatch(toy.dispatch)(zip_inputs(dict(a=1, d=2)))
    assert toy.calls == []  # rejected before any point is evaluated


def test_dispatch_that_raises_names_kernel_and_point():
    class Picky(JitKernel[K]):
        name = "picky_kernel"
        CompileKey = K

        def dispatch(self, *, ratio, block):
            if ratio == 3:
                raise ValueError("ratio must be a power of two")
            return K(ratio, block)

    p = Picky()
    with pytest.raises(KeySpaceError) as info:
        trace_dispatch(p.dispatch)(ratio=choices(1, 2, 3, 4), block=64)
    msg = str(info.value)
    assert msg.startswith("picky_kernel: dispatch raised at ")
    assert re.search(r"\{'ratio': 3, 'block': 64\}", msg)
    assert "ratio must be a power of two" in msg
    assert isinstance(info.value.__cause__, ValueError)


def test_when_that_raises_and_bad_positional():
    toy = Toy()
    with pytest.raises(KeySpaceError, match=r"toy_kernel: when\(\) raised at \{'a': 0\}"):
        trace_dispatch(toy.dispatch)(a=choices(0), when=lambda a: 1 // a)
    with pytest.raises(KeySpaceError, match="zip_inputs"):
        trace_dispatch(toy.dispatch)(dict(a=1))


def test_missing_required_input_is_a_dispatch_error():
    toy = Toy()
    with pytest.raises(KeySpaceError, match="toy_kernel: dispatch raised at"):
        trace_dispatch(toy.dispatch)(b=choices(1))


# --- property: the space equals plain nested loops -----------------------------------------

@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=0, max_size=4),
    st.lists(st.integers(0, 3), min_size=0, max_size=3),
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=0, max_size=3),
    st.integers(1, 4),
)
def test_space_equals_nested_loops(a_vals, b_vals, zrows, mod):
    def dispatch(*, a, b, c, d):
        return (a % mod, b, c + d)

    expected = []
    for c, d in zrows:  # zip groups come first, then the axes in order
        for a in a_vals:
            for b in b_vals:
                if (a + b) % 2 == 0:
                    continue
                key = (a % mod, b, c + d)
                if key not in expected:
                    expected.append(key)
    got = trace_dispatch(dispatch)(
        zip_inputs(*[dict(c=c, d=d) for c, d in zrows]),
        a=choices(*a_vals),
        b=choices(*b_vals),
        when=lambda a, b, **_: (a + b) % 2 == 1,
    )
    assert got == expected
