"""Stored values are values: nothing a caller does to its own objects changes what a store holds.

A JSON payload handed to a write is the caller's object, and so is one a read
returns. Mutating either afterwards must change nothing stored: not the run's
input, output or error, not a history payload, a command's input, result or
error, nor a signal's payload, not even a terminal run's.
"""

from __future__ import annotations

from typing import Any

from kit.conformance._harness import LEASE, AreaChecks
from kit.contract import (
    Decision,
    NewCommand,
    NewEvent,
    Promise,
    RunStatus,
    Snapshot,
    Storage,
)
from kit.contract.outcomes import Outcome

__all__ = ["StoredValueChecks", "fresh_payload", "poke"]


def fresh_payload(tag: str) -> dict[str, Any]:
    """A new nested payload (a list and an object inside an object), equal for equal tags."""
    return {"tag": tag, "list": [1, {"n": 1}], "obj": {"inner": ["x"]}}


def poke(value: Any) -> None:
    """Mutate a payload built by :func:`fresh_payload` in place, at every level."""
    value["list"].append("poked")
    value["list"][1]["n"] = 99
    value["obj"]["inner"].append("poked")
    value["obj"]["new"] = True
    value["tag"] = "poked"


class StoredValueChecks(AreaChecks):
    area = "keys_and_payloads"

    def test_mutating_arguments_after_writes_changes_nothing_stored(self, store: Storage) -> None:
        """Mutating the payload objects passed to start_run, commit_decision, send_signal, complete_command
        and fail_command after the call changes nothing the store holds (signals and commands when the
        store promises them)."""
        commands, signals = self.promised(Promise.COMMANDS), self.promised(Promise.SIGNALS)
        ref = self.define(store)
        given = {name: fresh_payload(name) for name in ("input", "event", "command", "signal", "result", "error",
                                                       "output", "failed", "retried")}
        store.start_run("run-1", ref, given["input"])
        claim = self.claim_one(store)
        new_commands = (NewCommand("op", "x", given["command"]), NewCommand("op2", "x", max_attempts=2))
        decision = Decision(RunStatus.PENDING, events=(NewEvent("e", given["event"]),),
                            commands=new_commands if commands else ())
        assert store.commit_decision(claim, claim.revision, decision) is Outcome.COMMITTED
        poked = ["input", "event"]
        if signals:
            assert store.send_signal("run-1", "go", given["signal"], "sig").created
            poked.append("signal")
        if commands:
            claimed = {c.operation_key: c for c in store.claim_commands("w", LEASE, limit=2)}
            assert store.complete_command(claimed["op"], given["result"]) is Outcome.COMPLETED
            assert store.fail_command(claimed["op2"], given["retried"]) is Outcome.RETRY_SCHEDULED
            poked += ["command", "result", "retried"]
        for name in poked:
            poke(given[name])
        expected = {name: fresh_payload(name) for name in poked}
        if commands:
            expected["error"] = expected.pop("retried")
        self._assert_stored(store, expected)
        if commands:
            retried = store.claim_commands("w", LEASE)[0]
            assert store.fail_command(retried, given["failed"], retryable=False) is Outcome.FAILED
            poke(given["failed"])
            assert store.list_commands("run-1")[1].error == fresh_payload("failed"), "a failure's error changed"
        claim = self.claim_one(store)
        done = Decision(RunStatus.COMPLETED, output=given["output"], error=given["error"])
        assert store.commit_decision(claim, claim.revision, done) is Outcome.COMMITTED
        poke(given["output"])
        poke(given["error"])
        run = store.get_run("run-1")
        assert run is not None and run.status is RunStatus.COMPLETED
        assert (run.output, run.error) == (fresh_payload("output"), fresh_payload("error")), \
            "a terminal run's output or error changed when the caller mutated its own objects"

    def test_mutating_read_results_changes_nothing_stored(self, store: Storage) -> None:
        """Mutating the payloads that reads and claims return (runs, history, snapshots, commands, command
        claims, signals, signal receipts, start results) changes nothing the store holds (signals and
        commands when the store promises them)."""
        commands, signals = self.promised(Promise.COMMANDS), self.promised(Promise.SIGNALS)
        ref = self.define(store)
        started = store.start_run("run-1", ref, fresh_payload("input"))
        poke(started.run.input)
        claim = self.claim_one(store)
        decision = Decision(RunStatus.PENDING, events=(NewEvent("e", fresh_payload("event")),),
                            commands=(NewCommand("op", "x", fresh_payload("command")),) if commands else ())
        assert store.commit_decision(claim, claim.revision, decision) is Outcome.COMMITTED
        expected: dict[str, Any] = {"input": fresh_payload("input"), "event": fresh_payload("event")}
        if signals:
            receipt = store.send_signal("run-1", "go", fresh_payload("signal"), "sig")
            assert receipt.signal is not None
            poke(receipt.signal.payload)
            expected["signal"] = fresh_payload("signal")
        if commands:
            command = store.claim_commands("w", LEASE)[0]
            poke(command.input)
            assert store.complete_command(command, fresh_payload("result")) is Outcome.COMPLETED
            expected.update(command=fresh_payload("command"), result=fresh_payload("result"), error=None)
        if signals:
            duplicate = store.send_signal("run-1", "go", fresh_payload("signal"), "sig")
            if duplicate.signal is not None:
                poke(duplicate.signal.payload)
        for _ in range(2):  # every read's result poked once, then everything read again
            run = store.get_run("run-1")
            assert run is not None
            poke(run.input)
            poke(store.list_runs()[0].input)
            poke(store.get_history("run-1")[0].payload)
            if commands:
                listed = store.list_commands("run-1")[0]
                poke(listed.input)
                poke(listed.result)
                got = store.get_command(listed.command_id)
                assert got is not None
                poke(got.input)
            if signals:
                poke(store.list_signals("run-1")[0].payload)
            self._assert_stored(store, expected)
        claim = self.claim_one(store)
        snapshot = store.load_claimed(claim)
        assert isinstance(snapshot, Snapshot)
        returned = [snapshot.run.input, snapshot.history[0].payload]
        if commands:
            returned += [snapshot.command_results[0].input, snapshot.command_results[0].result]
        if signals:
            returned.append(snapshot.signals[0].payload)
        for value in returned:
            poke(value)
        self._assert_stored(store, expected)

    # -- helpers ----------------------------------------------------------
    def _assert_stored(self, store: Storage, expected: dict[str, Any]) -> None:
        """Each of run-1's stored values named in ``expected`` equals it: input, first event payload, first
        command's input and result, second command's error (if any), first signal's payload. Reads only
        the families ``expected`` names."""
        run = store.get_run("run-1")
        assert run is not None
        got: dict[str, Any] = {"input": run.input, "event": store.get_history("run-1")[0].payload}
        if {"command", "result", "error"} & set(expected):
            commands = store.list_commands("run-1")
            got.update(command=commands[0].input, result=commands[0].result,
                       error=commands[1].error if len(commands) > 1 else None)
        if "signal" in expected:
            got["signal"] = store.list_signals("run-1")[0].payload
        changed = sorted(k for k in expected if got[k] != expected[k])
        assert not changed, f"stored {', '.join(changed)} changed when the caller mutated its own objects"
