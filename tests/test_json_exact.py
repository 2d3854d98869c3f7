"""The one JSON equality: types must match, numbers compare exactly, differences are named by path."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kit.contract import Run
from kit.contract.json_exact import ExactState, assert_json_equal, json_difference, json_equal
from kit.contract.json_samples import INTEGER_BOUNDARIES, INTEGRAL_FLOATS, NUMBER_BOUNDARIES
from kit.contract.validation import decode_json, encode_json

#: Pairs Python's == calls equal that are different JSON values.
LOOSE_PAIRS: list[tuple[Any, Any]] = [
    (True, 1), (False, 0), (1, 1.0), (0, -0.0), (2**63, 2.0**63), (2**53, 2.0**53), (1e300, int(1e300)),
    ({"a": True}, {"a": 1}), ([1, [2.0]], [1, [2]]), ({"n": 2**64}, {"n": 2.0**64}),
]


@pytest.mark.parametrize(("a", "b"), LOOSE_PAIRS, ids=[repr(p) for p in LOOSE_PAIRS])
def test_loose_python_equality_is_not_json_equality(a: Any, b: Any) -> None:
    assert a == b  # what a check written with == would have accepted
    assert not json_equal(a, b) and not json_equal(b, a)


def test_a_big_integer_is_not_its_nearest_double() -> None:
    """10**30 and 1e30 are one number to a decimal comparison, two to JSON (the double is 1e30 + 19884624838656)."""
    assert not json_equal(10**30, 1e30) and not json_equal({"n": [10**30]}, {"n": [1e30]})


def test_equal_values_are_equal() -> None:
    value = {"a": [1, 2.5, None, True, "x", {"b": []}], "n": 2**64 + 1, "f": 1.0}
    assert json_equal(value, json.loads(json.dumps(value)))
    assert json_equal([1, 2], (1, 2)), "a tuple is an array, as the encoder writes it"


def test_json_has_one_zero() -> None:
    """-0.0 equals 0.0 (one JSON zero), but a float zero is never the integer 0."""
    assert json_equal(-0.0, 0.0)
    assert not json_equal(-0.0, 0)


def test_order_and_keys_are_exact() -> None:
    assert not json_equal([1, 2], [2, 1])
    assert not json_equal({"a": 1}, {"a": 1, "b": 2})
    assert not json_equal({"a": 1}, {"A": 1})


def test_difference_names_the_path_and_both_typed_values() -> None:
    message = json_difference({"a": [0, {"b": True}]}, {"a": [0, {"b": 1}]})
    assert message == "$['a'][1]['b']: got True (bool), want 1 (int)"
    keys = json_difference({"a": 1, "x": 2}, {"a": 1, "y": 2})
    assert keys is not None and "'x'" in keys and "'y'" in keys
    with pytest.raises(AssertionError, match=r"the result is not the same JSON value: \$\[0\]: got 1 \(int\), want 1\.0 \(float\)"):
        assert_json_equal([1], [1.0], "the result")


def test_entities_compare_field_by_field(sample_run: Run) -> None:
    from dataclasses import replace

    assert json_equal(sample_run, replace(sample_run))
    message = json_difference(replace(sample_run, input={"flag": 1}), sample_run)
    assert message is not None and message.startswith("$.input['flag']: got 1 (int), want True (bool)")


@pytest.fixture
def sample_run() -> Run:
    from datetime import UTC, datetime

    from kit.contract import DefinitionRef, RunStatus

    at = datetime(2030, 1, 1, tzinfo=UTC)
    return Run("r", "t", DefinitionRef("wf", "1", "0" * 64), RunStatus.PENDING, 0, None, 0, None, at, False, False, None,
               {"flag": True}, None, None, None, at, at)


def test_deep_values_compare_without_recursion() -> None:
    a: Any = 1
    b: Any = 1.0
    for _ in range(5000):
        a, b = [a], [b]
    assert json_equal(a, a) and not json_equal(a, b)


def test_exact_state_compares_exactly() -> None:
    state = ExactState({"run-1": {"input": True}})
    assert state == {"run-1": {"input": True}}
    assert state != {"run-1": {"input": 1}}
    assert not state == {"run-1": {"input": 1}}  # noqa: SIM201 (== itself must be exact)
    assert (state, 1) != ({"run-1": {"input": 1}}, 1)


@pytest.mark.parametrize("number", NUMBER_BOUNDARIES, ids=repr)
def test_encoded_numbers_keep_their_type_and_value(number: float) -> None:
    """The stored text of every boundary number parses back to the same number of the same type."""
    for value in (number, [number], {"n": [number]}):
        assert json_equal(decode_json(encode_json(value)), value)


def test_large_floats_are_spelled_as_floats() -> None:
    """A store keeping numbers as decimals (jsonb) prints what it got: a float must carry a fraction."""
    text = encode_json({"f": 1.5e300, "s": "e+", "i": 10**30})
    assert "e+300" not in text and text.endswith(',"s":"e+","i":1000000000000000000000000000000}')
    assert json.loads(text)["f"] == 1.5e300


def test_samples_cover_every_boundary() -> None:
    for n in (2**31, 2**53, 2**63):
        assert {n - 1, n, n + 1, -n - 1, -n, -n + 1} <= set(INTEGER_BOUNDARIES)
    assert {0, 1, -1, 2**64 - 1, 2**64, 2**64 + 1, 10**30} <= set(INTEGER_BOUNDARIES)
    assert all(isinstance(f, float) and f.is_integer() for f in INTEGRAL_FLOATS)
    assert {repr(f) for f in (1.0, -0.0, 1e300)} <= {repr(f) for f in INTEGRAL_FLOATS}
