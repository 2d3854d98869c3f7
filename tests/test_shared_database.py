"""The conformance suites share one migrated database per process and reset it between checks:
a check never sees a row an earlier check wrote, and the reset touches only the kit's tables.

Servers are discovered like the conformance suites do: unreachable ones skip as
``not-reachable``, and fail instead when ``KIT_REQUIRE_BACKENDS`` names them.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from kit.clock import TEST_CLOCK_START
from kit.conformance._shared import SharedDatabase, fresh_database, needs_fresh_database
from kit.contract import (
    Backend,
    ClockMode,
    Decision,
    NewCommand,
    NewEvent,
    NewTimer,
    RunStatus,
    Storage,
    digest_of,
)
from kit.inspect import observable_state
from kit.pytest_plugin import use_backend

TENANTS = ("tenant-a", "tenant-b")


@pytest.fixture(params=["memory", "sqlite", "postgres", "mysql"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    yield from use_backend(request.param)


def _fill(store: Storage) -> None:
    """Rows in every family: a definition, runs, history, commands, signals, timers; the clock moved."""
    ref = store.ensure_definition("wf", "1", digest_of(b"body"), b"body").ref
    store.start_run("run-1", ref, {"n": 1})
    store.start_run("run-2", ref, {"n": 2})
    claim = store.claim_runs("w1", timedelta(seconds=30), limit=1)[0]
    decision = Decision(
        RunStatus.BLOCKED,
        events=(NewEvent("command-scheduled", {"key": "op-1"}),),
        commands=(NewCommand("op-1", "do-work", {"n": 1}),),
        timers=(NewTimer("sleep", delay=timedelta(seconds=5)),),
    )
    store.commit_decision(claim, claim.revision, decision)
    store.send_signal("run-2", "go", {"x": 1}, "sig-1")
    store.advance_test_clock(timedelta(hours=1))


def _leftovers(store: Storage) -> dict[str, object]:
    """Everything of the store's tenant a check could read back."""
    return {
        "runs": dict(observable_state(store)),
        "definition": store.get_definition("wf", "1"),
        "claimable": store.claim_runs("w9", timedelta(seconds=30), limit=10),
        "commands": store.claim_commands("w9", timedelta(seconds=30), limit=10),
        "timers": store.fire_due_timers(),
    }


def test_a_reset_database_shows_no_row_of_any_tenant_and_the_clock_at_its_start(backend: Backend) -> None:
    shared = SharedDatabase(backend)
    try:
        first = shared.checkout()
        assert first is not None, "a backend whose databases can reset must share one"
        for tenant in TENANTS:
            store = first.open(tenant, clock=ClockMode.TEST)
            try:
                _fill(store)
                assert _leftovers(store)["runs"], "the filled store shows no run: the check proves nothing"
            finally:
                store.close()
        second = shared.checkout()
        assert second is first, "the second check must reuse the migrated database"
        for tenant in TENANTS:
            store = second.open(tenant, clock=ClockMode.TEST)
            try:
                store.verify_schema()  # the reset kept the migrated schema
                assert store.now() == TEST_CLOCK_START
                assert _leftovers(store) == {
                    "runs": {}, "definition": None, "claimable": [], "commands": [], "timers": []
                }
            finally:
                store.close()
    finally:
        shared.close()


def test_a_check_marked_fresh_gets_its_own_database() -> None:
    @fresh_database
    class Area:
        def test_one(self) -> None: ...

        def helper(self) -> None: ...

    def test_plain() -> None: ...

    assert needs_fresh_database(Area.test_one)
    assert not needs_fresh_database(Area.helper)
    assert not needs_fresh_database(test_plain)
