"""Whole workloads: every scenario ends as its input determines, on every backend.

Servers are discovered like the conformance suites do: unreachable ones skip
as ``not-reachable``, and fail instead when ``KIT_REQUIRE_BACKENDS`` names them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from kit.cli import main
from kit.contract import Backend, ClockMode, Storage
from kit.pytest_plugin import use_backend
from kit.runtime import HANDLERS, SCENARIOS, Runtime, load_workflows, pick_scenarios, run_scenarios
from kit.runtime.scenarios import verify


@pytest.fixture(params=["memory", "sqlite", "postgres", "mysql"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    yield from use_backend(request.param)


def test_every_scenario_ends_as_determined_and_replays_exactly(backend: Backend) -> None:
    runs = len(SCENARIOS)  # one of each: the loop (151 sequential decisions) sets the pace
    report = run_scenarios(backend, pick_scenarios("all"), runs, workers=4, timeout_s=120, replay_sample=1)
    assert report.ok, report.problems + report.errors
    assert sum(report.statuses.values()) == runs
    assert report.replay_checked == runs  # every run's history replayed to its recorded decisions
    assert report.stats.attempts["committed"] == report.decisions > 0
    assert report.stats.ended == report.statuses
    assert report.signals["committed"] == report.signals["resent duplicate"] == runs // len(SCENARIOS)


@pytest.fixture
def sqlite() -> Iterator[Backend]:
    yield from use_backend("sqlite")


def test_deciders_and_workers_in_separate_runtimes_share_nothing_but_the_store(sqlite: Backend) -> None:
    """Two 'processes' (no shared bells or stats): one only decides, the other works and fires timers."""
    registry = load_workflows()
    database = sqlite.provision()
    try:
        store = database.open(clock=ClockMode.DATABASE)
        store.migrate()
        registry.register(store)
        scenarios = [SCENARIOS[name] for name in ("order", "sleep", "saga", "cancel")]
        expected = {}
        for i, scenario in enumerate(scenarios * 2):
            run_id = f"{scenario.name}-{i}"
            store.start_run(run_id, registry[scenario.workflow].ref, scenario.make_input(i))
            expected[run_id] = scenario
        deciding = Runtime(database, registry, {}, deciders=2, workers=0, timer_loops=0)
        working = Runtime(database, registry, HANDLERS, deciders=0, workers=2, timer_loops=1)
        with deciding, working:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not all(_ended(store, r) for r in expected):
                time.sleep(0.02)  # a bounded wait for completion
        assert not deciding.errors and not working.errors
        for run_id, scenario in expected.items():
            run = store.get_run(run_id)
            assert run is not None and run.status.terminal
            assert verify(scenario, run, store.list_commands(run_id)) is None
        assert deciding.stats.decisions > 0 and working.stats.commands["completed"] > 0
        assert deciding.stats.commands["completed"] == 0 and working.stats.decisions == 0
        store.close()
    finally:
        database.drop()


def _ended(store: Storage, run_id: str) -> bool:
    run = store.get_run(run_id)
    return run is not None and run.status.terminal


def test_kit_run_cli_passes_and_rejects_unknown_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "order,approval", "--backend", "memory", "--runs", "4", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "decisions per second" in out and "PASS" in out and "p50" in out
    assert main(["run", "nope", "--backend", "memory", "--no-progress"]) == 2
    assert "unknown scenario 'nope'" in capsys.readouterr().err
