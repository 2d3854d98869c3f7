"""The compared state is built without a generic deep copy, yet is exactly what ``asdict`` gives and
shares no payload with the store."""

from __future__ import annotations

from dataclasses import asdict
from datetime import timedelta

from kit.contract import ClockMode, Decision, NewCommand, NewEvent, NewTimer, RunStatus, digest_of
from kit.inspect import as_dict, observable_state
from kit.reference import MemoryBackend


def test_every_entity_row_equals_asdict_and_its_payloads_are_copies() -> None:
    database = MemoryBackend().provision()
    store = database.open("t", clock=ClockMode.TEST)
    ref = store.ensure_definition("wf", "1", digest_of(b"b"), b"b").ref
    store.start_run("run-1", ref, {"deep": [{"x": [1, 2.5, None]}]})
    claim = store.claim_runs("w1", timedelta(seconds=30))[0]
    store.commit_decision(claim, claim.revision, Decision(
        RunStatus.BLOCKED, events=(NewEvent("e", {"p": [1]}),),
        commands=(NewCommand("op", "do", {"n": [1]}),), timers=(NewTimer("t", delay=timedelta(seconds=1)),)))
    store.send_signal("run-1", "s", {"q": {"r": 1}}, "d1")
    entities = [store.get_run("run-1"), *store.get_history("run-1"), *store.list_commands("run-1"),
                *store.list_signals("run-1"), *store.list_timers("run-1")]
    assert len(entities) == 5
    for entity in entities:
        assert as_dict(entity) == asdict(entity)
        for field in ("input", "payload"):
            if isinstance(getattr(entity, field, None), dict):
                assert as_dict(entity)[field] is not getattr(entity, field), f"{field} shared with the entity"
    state = observable_state(store)
    state["run-1"]["run"]["input"]["deep"].append("mutated")
    assert observable_state(store)["run-1"]["run"]["input"] == {"deep": [{"x": [1, 2.5, None]}]}
