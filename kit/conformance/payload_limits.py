"""Payload limits: the contract's JSON depth limit and text rules hold at every entry point.

A value the contract accepts must come back from every read, whatever the
caller's own stack depth; a value it refuses (nesting deeper than
:data:`~kit.contract.validation.MAX_JSON_DEPTH`, U+0000 or a lone surrogate in
any text) is refused with :class:`~kit.contract.InvalidArgument` before
anything is written, by every operation that takes one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kit.conformance._harness import LEASE, AreaChecks, requires
from kit.contract import (
    Decision,
    InvalidArgument,
    NewCommand,
    NewEvent,
    Promise,
    RunStatus,
    Snapshot,
    Storage,
)
from kit.contract.deep_json import from_deep_stack, nested, nesting_of
from kit.contract.outcomes import Outcome
from kit.contract.validation import MAX_JSON_DEPTH

__all__ = ["PayloadLimitChecks"]

#: Text no dialect stores as given; the contract refuses it in every argument and payload.
UNSTORABLE_TEXT = {"nul": "a\x00b", "lone_surrogate": "a\ud800b"}


class PayloadLimitChecks(AreaChecks):
    area = "keys_and_payloads"

    def test_json_at_the_depth_limit_reads_back_from_any_stack(self, store: Storage) -> None:
        """A payload nested exactly to the contract's depth limit is stored and reads back whole from every
        read (run, history, snapshot), also when the caller's own stack is deep: no write or read depends
        on it."""
        value = nested(MAX_JSON_DEPTH)
        ref = self.define(store)
        from_deep_stack(lambda: store.start_run("run-1", ref, value))
        claim = self.claim_one(store)
        decision = Decision(RunStatus.PENDING, events=(NewEvent("e", value),))
        outcome = from_deep_stack(lambda: store.commit_decision(claim, claim.revision, decision))
        assert outcome is Outcome.COMMITTED
        claim = self.claim_one(store)
        reads: dict[str, Callable[[], Any]] = {
            "get_run input": lambda: store.get_run("run-1").input,  # type: ignore[union-attr]
            "get_history payload": lambda: store.get_history("run-1")[0].payload,
            "load_claimed history payload": lambda: _snapshot(store.load_claimed(claim)).history[0].payload,
            "load_claimed run input": lambda: _snapshot(store.load_claimed(claim)).run.input,
        }
        for where, read in reads.items():
            for stack in ("a shallow stack", "a deep stack"):
                got = read() if stack == "a shallow stack" else from_deep_stack(read)
                assert nesting_of(got) == (MAX_JSON_DEPTH, "bottom"), f"{where} from {stack} came back changed"

    def test_json_deeper_than_the_limit_is_refused_everywhere(self, store: Storage) -> None:
        """A payload nested one level deeper than the contract's limit is refused with InvalidArgument by
        every operation that takes a payload, and nothing is written."""
        too_deep = nested(MAX_JSON_DEPTH + 1)
        self._refused_everywhere(store, too_deep)

    @pytest.mark.parametrize("kind", sorted(UNSTORABLE_TEXT))
    def test_unstorable_text_is_refused_in_every_payload(self, store: Storage, kind: str) -> None:
        """U+0000 or a lone surrogate in a payload string or object key is refused with InvalidArgument by
        every operation that takes a payload, and nothing is written."""
        text = UNSTORABLE_TEXT[kind]
        for bad in (text, {"k": [text]}, {text: 1}):
            self._refused_everywhere(store, bad)

    @requires(Promise.CANCEL_REQUESTS)
    @pytest.mark.parametrize("kind", sorted(UNSTORABLE_TEXT))
    def test_unstorable_text_is_refused_as_cancel_reason(self, store: Storage, kind: str) -> None:
        """request_cancel() refuses a reason holding U+0000 or a lone surrogate with InvalidArgument, as every
        other text argument is refused, and the run is left uncancelled."""
        self.waiting(store)
        with pytest.raises(InvalidArgument):
            store.request_cancel("run-1", UNSTORABLE_TEXT[kind])
        run = store.get_run("run-1")
        assert run is not None and not run.cancel_requested and run.status is self.waiting_status()
        assert store.request_cancel("run-1", "a plain reason") is Outcome.COMMITTED

    @pytest.mark.parametrize("kind", sorted(UNSTORABLE_TEXT))
    def test_unstorable_text_is_refused_in_every_key_and_name(self, store: Storage, kind: str) -> None:
        """U+0000 or a lone surrogate in a run id, idempotency key, signal name or dedup key, or an event
        kind or operation key (or a command's, when the store promises commands) is refused with
        InvalidArgument, and nothing is written."""
        text = UNSTORABLE_TEXT[kind]
        ref = self.define(store)
        with pytest.raises(InvalidArgument):
            store.start_run(text, ref)
        with pytest.raises(InvalidArgument):
            store.start_run("run-x", ref, idempotency_key=text)
        assert [r.run_id for r in store.list_runs()] == []
        self.start(store, definition=ref)
        if self.promised(Promise.SIGNALS):
            for name, key in ((text, "k"), ("go", text)):
                with pytest.raises(InvalidArgument):
                    store.send_signal("run-1", name, None, key)
            assert store.list_signals("run-1") == []
            assert store.send_signal("run-1", "go", None, "plain").created
        claim = self.claim_one(store)
        for event in (NewEvent(text, None), NewEvent("e", None, operation_key=text)):
            with pytest.raises(InvalidArgument):
                store.commit_decision(claim, claim.revision, Decision(RunStatus.PENDING, events=(event,)))
        assert store.get_history("run-1") == []
        if self.promised(Promise.COMMANDS):
            with pytest.raises(InvalidArgument):
                store.commit_decision(claim, claim.revision,
                                      Decision(RunStatus.PENDING, commands=(NewCommand(text, "x"),)))
            assert store.get_history("run-1") == [] and store.list_commands("run-1") == []

    # -- helpers ----------------------------------------------------------
    def _refused_everywhere(self, store: Storage, bad: Any) -> None:
        """``bad`` refused by start_run, commit_decision (event, output, error, and command input when the
        store promises commands), send_signal (when promised), complete_command and fail_command (when
        commands are promised); the store is unchanged after each refusal."""
        commands = self.promised(Promise.COMMANDS)
        ref = self.define(store)
        with pytest.raises(InvalidArgument):
            store.start_run("refused", ref, bad)
        assert store.get_run("refused") is None
        run_id = f"run-{len(store.list_runs()) + 1}"
        claim = self.started_and_claimed(store, run_id)
        before = store.get_run(run_id)
        decisions = {
            "event payload": Decision(RunStatus.PENDING, events=(NewEvent("e", bad),)),
            "output": Decision(RunStatus.COMPLETED, output=bad),
            "error": Decision(RunStatus.FAILED, error=bad),
        }
        if commands:
            decisions["command input"] = Decision(RunStatus.PENDING, commands=(NewCommand("op", "x", bad),))
        for where, decision in decisions.items():
            with pytest.raises(InvalidArgument):
                store.commit_decision(claim, claim.revision, decision)
            assert store.get_run(run_id) == before, f"a refused {where} changed the run"
        assert store.get_history(run_id) == []
        if self.promised(Promise.SIGNALS):
            with pytest.raises(InvalidArgument):
                store.send_signal(run_id, "go", bad, "sig")
            assert store.list_signals(run_id) == []
        if not commands:
            return  # the run stays claimed (not claimable), so the next call claims its own run
        assert store.list_commands(run_id) == []
        waiting = Decision(self.waiting_status(), commands=(NewCommand("op", "x"), NewCommand("op2", "x")))
        assert store.commit_decision(claim, claim.revision, waiting) is Outcome.COMMITTED
        if waiting.next_status is RunStatus.PENDING:  # a store that cannot block: hold the run claimed
            self.claim_one(store)
        claimed = store.claim_commands("w", LEASE, limit=2)
        assert len(claimed) == 2
        with pytest.raises(InvalidArgument):
            store.complete_command(claimed[0], bad)
        with pytest.raises(InvalidArgument):
            store.fail_command(claimed[1], bad, retryable=False)
        for command in store.list_commands(run_id):
            assert command.status.value == "claimed" and command.result is None, "a refused result was stored"


def _snapshot(result: Snapshot | Outcome) -> Snapshot:
    assert isinstance(result, Snapshot), f"load_claimed answered {result!r}, not a snapshot"
    return result
