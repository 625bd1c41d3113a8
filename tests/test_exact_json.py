"""The restore index's exact JSON: :func:`zerojit.manifest.decode_exact_text` (read while ``json``
parses) gives back what :func:`~zerojit.manifest.encode_exact_text` wrote, types included, and
reads exactly as :func:`~zerojit.manifest.decode_exact` (the parsed-tree reader) does: the same
values, the same refusals."""

from __future__ import annotations

import json

import pytest
import triton.language as tl
from hypothesis import given, settings
from hypothesis import strategies as st

from zerojit.manifest import decode_exact, decode_exact_text, encode_exact, encode_exact_text

DTYPES = [tl.float16, tl.bfloat16, tl.float32, tl.int32, tl.int64, tl.uint8]

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8), st.sampled_from(DTYPES))
hashable = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=4)),
                        lambda inner: st.lists(inner, max_size=3).map(tuple), max_leaves=6)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.lists(inner, max_size=4).map(tuple),
    st.dictionaries(hashable, inner, max_size=4)), max_leaves=20)


def shape(value):
    """``value`` with every container's and scalar's type spelled out (1 == True == 1.0 in Python)."""
    if isinstance(value, dict):
        return ("dict", [(shape(k), shape(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [shape(v) for v in value])
    return (type(value).__name__, str(value) if isinstance(value, tl.dtype) else value)


@settings(max_examples=300, deadline=None)
@given(values)
def test_text_round_trips_exactly_and_reads_as_the_tree_reader(value):
    text = encode_exact_text(value)
    assert json.loads(text) == encode_exact(value)
    back = decode_exact_text(text, "here")
    assert shape(back) == shape(value)
    assert shape(back) == shape(decode_exact(json.loads(text), "here"))


@pytest.mark.parametrize("text, why", [
    ('{"tuple": [1], "dict": []}', "is not an encoded value"),
    ('{"pickle": "gASV"}', "{'pickle': 'gASV'} is not an encoded value"),
    ('{"tuple": 3}', "is not an encoded value"),
    ('{"dict": [[1]]}', "dict entry [1] is not a [key, value] pair"),
    ('{"dict": [[[1], 2]]}', "dict key [1] is not hashable"),
    ('{"dict": [[{"dict": []}, 2]]}', "dict key {} is not hashable"),
    ('{"triton_dtype": "fp99"}', "is not an encoded value"),
    ('[{"tuple": [{"x": 1}]}]', "{'x': 1} is not an encoded value"),
])
def test_both_readers_refuse_what_encode_exact_never_writes(text, why):
    with pytest.raises(ValueError, match="^here: ") as e:
        decode_exact_text(text, "here")
    assert why in str(e.value)
    with pytest.raises(ValueError):
        decode_exact(json.loads(text), "here")


@pytest.mark.parametrize("text, why", [("NaN", "NaN is no finite number"), ('[1, -Infinity]', "-Infinity is no finite"),
                                       ('{"tuple": [1e400]}', "1e400 is no finite number"),
                                       ("9" * 5000, "digits"),
                                       ("[1,", "is no JSON text (Expecting value)"), ("", "is no JSON text")])
def test_text_that_is_no_exact_json_is_refused_naming_where(text, why):
    with pytest.raises(ValueError, match="^here: ") as e:
        decode_exact_text(text, "here")
    assert why in str(e.value)


def test_a_value_with_no_exact_form_is_refused_when_written():
    with pytest.raises(TypeError):
        encode_exact_text(float("inf"))
    with pytest.raises(TypeError):
        encode_exact_text(object())
