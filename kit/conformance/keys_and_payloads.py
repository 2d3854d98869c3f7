"""Keys compare byte-exactly; JSON values and microsecond timestamps round-trip exactly."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from kit.conformance._harness import LEASE, AreaChecks, requires
from kit.contract import (
    Decision,
    InvalidArgument,
    NewCommand,
    NewEvent,
    NewTimer,
    Promise,
    RunStatus,
    Snapshot,
    Storage,
)
from kit.contract.deep_json import nested
from kit.contract.json_exact import assert_json_equal, json_difference
from kit.contract.json_samples import INTEGER_BOUNDARIES, INTEGRAL_FLOATS, NUMBER_BOUNDARIES
from kit.contract.outcomes import Outcome
from kit.contract.validation import MAX_KEY, MAX_RUN_ID

__all__ = ["CONFUSABLE_KEYS", "JSON_SAMPLES", "KeyAndPayloadChecks"]

#: Four keys that collide under case-, accent- or normalisation-insensitive comparison.
CONFUSABLE_KEYS = ("Key", "key", "\u00e9", "e\u0301")

JSON_SAMPLES: dict[str, Any] = {
    "null": None,
    "true": True,
    "false": False,
    "zero": 0,
    "negative": -17,
    "int64_max": 2**63 - 1,
    "int64_min": -(2**63),
    "beyond_int64": 2**64 + 1,
    "huge_int": 10**30,
    "integer_boundaries": list(INTEGER_BOUNDARIES),
    "integral_floats": list(INTEGRAL_FLOATS),
    "numbers_nested": {"ints": {str(n): n for n in INTEGER_BOUNDARIES},
                       "floats": [[{"f": f}] for f in INTEGRAL_FLOATS],
                       "look_alike": [True, 1, 1.0, False, 0, 0.0, None]},
    "float": 0.1,
    "float_exponent": 1.5e300,
    "tiny_float": 5e-324,
    "empty_object": {},
    "empty_array": [],
    "empty_string": "",
    "unicode": {"emoji": "\U0001f600", "cjk": "\u4e2d\u6587", "rtl": "\u05e9\u05dc\u05d5\u05dd", "combining": "e\u0301"},
    "escapes": "quote \" backslash \\ newline \n tab \t slash / control \u0001",
    "nested": {"a": [1, {"b": [[], {}, None, {"c": [True, False]}]}], "z": {"y": {"x": {"w": "deep"}}}},
    "deep": {"k": [[[[[[[[[[[[[[[[[[[[["bottom"]]]]]]]]]]]]]]]]]]]]]},
    "deep_64": nested(64),
    "keys_like_numbers": {"1": "one", "01": "zero-one", "": "empty key"},
    "large": {"blob": "x" * 300_000, "list": list(range(2000))},
}


class KeyAndPayloadChecks(AreaChecks):
    area = "keys_and_payloads"

    def test_run_ids_are_byte_exact(self, store: Storage) -> None:
        """Run ids 'Key', 'key', 'é' and 'e'+U+0301 are four different runs."""
        ref = self.define(store)
        for i, run_id in enumerate(CONFUSABLE_KEYS):
            assert store.start_run(run_id, ref, {"i": i}).created
        for i, run_id in enumerate(CONFUSABLE_KEYS):
            run = store.get_run(run_id)
            assert run is not None and run.run_id == run_id
            assert_json_equal(run.input, {"i": i}, f"the input of {run_id!r}")

    def test_idempotency_keys_are_byte_exact(self, store: Storage) -> None:
        """Idempotency keys that differ only in case or normalisation start different runs."""
        ref = self.define(store)
        results = [store.start_run(f"run-{i}", ref, idempotency_key=k) for i, k in enumerate(CONFUSABLE_KEYS)]
        assert all(r.created for r in results)

    @requires(Promise.SIGNALS)
    def test_dedup_keys_are_byte_exact(self, store: Storage) -> None:
        """Signal dedup keys that differ only in case or normalisation are different signals."""
        self.waiting(store)
        assert all(store.send_signal("run-1", "go", {"k": k}, k).created for k in CONFUSABLE_KEYS)
        assert [s.dedup_key for s in store.list_signals("run-1")] == list(CONFUSABLE_KEYS)

    def test_operation_keys_are_byte_exact(self, store: Storage) -> None:
        """Command and timer operation keys that differ only in case or normalisation are all kept."""
        self.need_any(Promise.COMMANDS, Promise.TIMERS)
        commands, timers = self.promised(Promise.COMMANDS), self.promised(Promise.TIMERS)
        claim = self.started_and_claimed(store)
        decision = Decision(
            RunStatus.PENDING,
            commands=tuple(NewCommand(k, "x") for k in CONFUSABLE_KEYS) if commands else (),
            timers=tuple(NewTimer(k, delay=timedelta(seconds=1)) for k in CONFUSABLE_KEYS) if timers else (),
        )
        assert store.commit_decision(claim, 0, decision) is Outcome.COMMITTED
        if commands:
            assert [c.operation_key for c in store.list_commands("run-1")] == list(CONFUSABLE_KEYS)
        if timers:
            assert [t.operation_key for t in store.list_timers("run-1")] == list(CONFUSABLE_KEYS)

    def test_trailing_spaces_are_significant(self, store: Storage) -> None:
        """Keys differing only by trailing or leading spaces are different keys (no PAD SPACE comparison)."""
        if self.promised(Promise.SIGNALS):
            self.waiting(store, "run-1")
            keys = ["s", "s ", "s  "]
            assert all(store.send_signal("run-1", "go", {"k": k}, k).created for k in keys)
            assert [s.dedup_key for s in store.list_signals("run-1")] == keys
        ref = self.define(store)
        ids = ["k", "k ", "k  ", " k"]
        assert all(store.start_run(run_id, ref, {"id": run_id}).created for run_id in ids)
        assert [r.run_id for r in store.list_runs() if r.run_id != "run-1"] == sorted(ids)
        for run_id in ids:
            assert_json_equal(store.get_run(run_id).input, {"id": run_id}, f"the input of {run_id!r}")  # type: ignore[union-attr]

    def test_long_keys_differing_at_the_end_stay_distinct(self, store: Storage) -> None:
        """Maximum-length keys that differ only in their last character are never truncated together."""
        if self.promised(Promise.SIGNALS):
            self.waiting(store, "run-1")
            keys = ["k" * (MAX_KEY - 1) + c for c in "ab"]
            assert all(store.send_signal("run-1", "go", {"k": k[-1]}, k).created for k in keys)
            assert_json_equal([s.payload for s in store.list_signals("run-1")], [{"k": "a"}, {"k": "b"}], "the payloads")
        ref = self.define(store)
        long_ids = ["r" * (MAX_RUN_ID - 1) + c for c in "ab"]
        for run_id in long_ids:
            assert store.start_run(run_id, ref).created
        expected = [*long_ids, "run-1"] if self.promised(Promise.SIGNALS) else long_ids
        assert [r.run_id for r in store.list_runs()] == expected

    def test_over_long_and_empty_keys_are_refused(self, store: Storage) -> None:
        """Keys beyond the contract's limits, or empty, are refused before anything is stored."""
        ref = self.define(store)
        with pytest.raises(InvalidArgument):
            store.start_run("r" * (MAX_RUN_ID + 1), ref)
        with pytest.raises(InvalidArgument):
            store.start_run("", ref)
        with pytest.raises(InvalidArgument):
            store.start_run("ok", ref, idempotency_key="k" * (MAX_KEY + 1))
        assert store.list_runs() == []

    @pytest.mark.parametrize("sample", sorted(JSON_SAMPLES))
    def test_json_values_round_trip(self, store: Storage, sample: str) -> None:
        """A JSON value comes back as the same value from every place that stores one (the places of
        commands and signals when the store promises them)."""
        value = JSON_SAMPLES[sample]
        commands, signals = self.promised(Promise.COMMANDS), self.promised(Promise.SIGNALS)
        ref = self.define(store)
        store.start_run("run-1", ref, value)
        claim = self.claim_one(store)
        store.commit_decision(claim, claim.revision, Decision(
            RunStatus.PENDING, events=(NewEvent("e", value),),
            commands=(NewCommand("op", "x", value),) if commands else (),
        ))
        places: dict[str, Any] = {}
        if signals:
            store.send_signal("run-1", "s", value, "sig")
        if commands:
            command = store.claim_commands("w", LEASE)[0]
            store.complete_command(command, value)
            places["command input"] = command.input
        claim = self.claim_one(store)
        snapshot = store.load_claimed(claim)
        assert isinstance(snapshot, Snapshot)
        store.commit_decision(claim, claim.revision, Decision(RunStatus.COMPLETED, output=value, error=value))
        run = store.get_run("run-1")
        assert run is not None
        places["run input"] = snapshot.run.input
        places["event payload"] = snapshot.history[0].payload
        if signals:
            places["signal payload"] = snapshot.signals[0].payload
        if commands:
            places["command result"] = snapshot.command_results[0].result
        places["run output"] = run.output
        places["run error"] = run.error
        wrong = [f"{where} ({diff})" for where, got in places.items() if (diff := json_difference(got, value))]
        assert not wrong, f"{sample} came back changed from: {'; '.join(wrong)}"

    def test_numbers_at_every_boundary_round_trip_at_top_level(self, store: Storage) -> None:
        """Every integer at the int32, double, int64 and uint64 boundaries (each +-1), 10**30 and integral
        floats come back as the same number of the same type, as a whole run input and (when the store
        promises signals) a whole signal payload."""
        signals = self.promised(Promise.SIGNALS)
        if signals:
            self.waiting(store, "run-zz")
        ref = self.define(store)
        run_ids = [f"run-{i:02}" for i in range(len(NUMBER_BOUNDARIES))]
        for run_id, number in zip(run_ids, NUMBER_BOUNDARIES):
            assert store.start_run(run_id, ref, number).created
        for run_id, number in zip(run_ids, NUMBER_BOUNDARIES):
            run = store.get_run(run_id)
            assert run is not None
            assert_json_equal(run.input, number, f"run input {number!r}")
        if not signals:
            return
        for run_id, number in zip(run_ids, NUMBER_BOUNDARIES):
            store.send_signal("run-zz", "n", number, run_id)
        received = store.list_signals("run-zz")
        assert len(received) == len(NUMBER_BOUNDARIES)
        for number, signal in zip(NUMBER_BOUNDARIES, received):
            assert_json_equal(signal.payload, number, f"signal payload {number!r}")

    @pytest.mark.parametrize("bad", [float("nan"), float("inf"), {1: "int key"}, b"bytes", {"set": {1}}, ("tuple",)],
                             ids=["nan", "infinity", "int_key", "bytes", "set", "tuple"])
    def test_non_json_values_are_refused(self, store: Storage, bad: Any) -> None:
        """Values that are not JSON (NaN, non-str keys, bytes, sets, tuples) are refused up front."""
        ref = self.define(store)
        with pytest.raises(InvalidArgument):
            store.start_run("run-1", ref, bad)
        assert store.get_run("run-1") is None

    @requires(Promise.TIMERS)
    def test_microsecond_timestamps_round_trip(self, store: Storage) -> None:
        """Client-supplied timestamps (timer fire_at, wake_at) come back to the microsecond."""
        at = datetime(2031, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
        claim = self.started_and_claimed(store)
        decision = Decision(RunStatus.PENDING, timers=(NewTimer("t", fire_at=at),), wake_at=at - timedelta(microseconds=1))
        store.commit_decision(claim, 0, decision)
        assert store.list_timers("run-1")[0].fire_at == at
        assert store.get_run("run-1").wake_at == at - timedelta(microseconds=1)  # type: ignore[union-attr]

    @requires(Promise.TIMERS)
    def test_non_utc_offsets_are_normalised(self, store: Storage) -> None:
        """An aware timestamp in another zone is stored as the same instant, read back in UTC."""
        plus_two = timezone(timedelta(hours=2))
        at = datetime(2031, 6, 1, 12, 0, 0, 1, tzinfo=plus_two)
        claim = self.started_and_claimed(store)
        store.commit_decision(claim, 0, Decision(RunStatus.PENDING, timers=(NewTimer("t", fire_at=at),)))
        stored = store.list_timers("run-1")[0].fire_at
        assert stored == at and stored.utcoffset() == timedelta(0)

    @requires(Promise.TIMERS)
    def test_naive_timestamps_are_refused(self, store: Storage) -> None:
        """A naive datetime is ambiguous and is refused before anything is stored."""
        claim = self.started_and_claimed(store)
        with pytest.raises(InvalidArgument):
            store.commit_decision(claim, 0, Decision(RunStatus.PENDING, timers=(NewTimer("t", fire_at=datetime(2031, 1, 1)),)))
        assert store.list_timers("run-1") == []

    def test_returned_timestamps_are_aware_utc(self, store: Storage) -> None:
        """Every timestamp a store returns is timezone-aware UTC."""
        if self.promised(Promise.COMMANDS):
            self.blocked_on_command(store)
        else:
            self.start(store)
        run = store.get_run("run-1")
        assert run is not None
        stamps = [run.created_at, run.updated_at]
        if self.promised(Promise.COMMANDS):
            stamps.append(store.list_commands("run-1")[0].not_before)
        assert all(s.tzinfo is not None and s.utcoffset() == timedelta(0) for s in stamps)
