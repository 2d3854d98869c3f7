"""The model-free fault machine: a correct store keeps every invariant under it, seeded bugs whose violation is
an invariant die under it alone, its failures replay, and a store is given only the steps it promises."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kit.cli import main as kit_main
from kit.contract import Backend, Capability, ConfigurationError, Promise
from kit.machines.bundle import load_bundle, make_bundle, replay, save_bundle
from kit.machines.machine import Profile
from kit.machines.model_free import (
    MODEL_FREE,
    REFERENCE,
    choose_machine,
    step_families,
)
from kit.machines.model_free_machine import run_model_free
from kit.pytest_plugin import use_backend
from tests.promise_stores import WithholdingBackend
from tests.seeded_bugs._base import SeededBug
from tests.seeded_bugs.sqlite_bugs import SQLITE_BUGS

#: The machines' seed in the kit's own tests: fixed, so what is killed is reproducible.
SEED = 20261129

#: SQLite seeded bugs that break a promise a client can observe on its own (a stale effect, a second live claim,
#: a duplicate, a lost acknowledgement, a changed terminal, an answer naming another key...), not merely an
#: answer the reference engine would give differently: the model-free machine must kill each on its own.
INVARIANT_BUGS = (
    "commit_ignores_generation", "lease_compared_with_le", "revision_not_checked", "stale_completion_accepted",
    "commit_split_over_two_transactions", "inner_failure_swallowed", "ensure_definition_overwrites",
    "signal_dedup_missing", "idempotency_key_ignored", "keys_case_folded", "timer_fires_early",
    "generation_not_bumped", "wakeup_mark_forgotten", "pagination_inclusive", "claim_ignores_tenant",
    "completion_after_expiry_accepted", "completion_retry_applied_twice", "snapshot_drops_failed_results",
    "consume_checks_only_ownership", "seq_ignores_tenant", "verify_ignores_checksums",
)
#: Fault steps a store with every capability must have been given, or the machine proved nothing about them.
FAULTS = ("crash", "crash_during", "lost_ack", "skew", "race", "advance_to:lease", "advance_to:command")
#: Every step kind that needs a timer.
TIMER_KINDS = ("fire_timers", "advance_to:timer", "advance_to:wake", "decision:timers", "decision:cancel_timers",
               "decision:wake_after_ms")


def _bug(name: str) -> SeededBug:
    return next(b for b in SQLITE_BUGS if b.name == name)


@pytest.fixture
def sqlite() -> Iterator[Backend]:
    yield from use_backend("sqlite")


def test_sqlite_keeps_every_invariant_under_the_quick_profile(sqlite: Backend) -> None:
    """The built-in SQLite adapter passes the model-free machine, and every kind of fault really ran."""
    outcome = run_model_free(sqlite, "quick", SEED, shrink=False)
    assert outcome.error is None, outcome.error
    assert outcome.failure is None, outcome.failure["message"]
    kinds = outcome.extra["kinds"]
    assert outcome.extra["machine"] == MODEL_FREE
    assert [f for f in FAULTS if not kinds.get(f)] == [], kinds


@pytest.mark.parametrize("name", INVARIANT_BUGS)
def test_model_free_machine_alone_kills_seeded_bug(name: str) -> None:
    """Under the quick profile the model-free machine finds a broken invariant for the bug, without a model
    (idempotency retries with one key, case-variant keys, a fault inside a decision's statements and one run
    id decided in two tenants are rules of their own, so those bugs die whatever the seed)."""
    bug = _bug(name)
    backend = bug.make_backend()
    try:
        outcome = run_model_free(backend, "quick", SEED, shrink=False)
    finally:
        backend.close()
    assert outcome.error is None, f"the machine itself failed on {name}: {outcome.error}"
    assert outcome.failure is not None, f"seeded bug {name!r} ({bug.description}) survived {outcome.examples} examples"
    assert outcome.failure["divergence"]["kind"] in ("invariant", "error", "fault"), outcome.failure["message"]
    assert outcome.failure["machine"] == MODEL_FREE


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shrunk model-free failure bundle, recorded on the SQLite adapter whose claims reuse the old generation."""
    bug = _bug("generation_not_bumped")
    backend = bug.make_backend()
    backend.kit_spec = f"tests.seeded_bugs.registry:{bug.name}"  # type: ignore[attr-defined]
    try:
        outcome = run_model_free(backend, "quick", SEED)
        assert outcome.failure is not None
        bundle = make_bundle(backend.kit_spec, backend, "quick", SEED,  # type: ignore[attr-defined]
                             outcome.failure["steps"], outcome.failure["divergence"], machine=MODEL_FREE,
                             families=outcome.extra["families"])
    finally:
        backend.close()
    return save_bundle(bundle, tmp_path_factory.mktemp("seeds"))


def test_model_free_bundle_records_its_machine(recorded: Path) -> None:
    bundle = json.loads(recorded.read_text())
    assert bundle["machine"] == MODEL_FREE
    assert set(bundle["families"]) >= {"leases", "timers", "test_clock", "statement_faults"}
    assert bundle["steps"] and bundle["divergence"]["step"] == len(bundle["steps"]) - 1
    assert bundle["divergence"]["kind"] == "invariant"


def test_model_free_bundle_replays_the_same_violation_twice(recorded: Path) -> None:
    """Replaying the bundle (in the model-free machine, as recorded) reproduces the violation, identically."""
    bundle = load_bundle(recorded)
    runs = []
    for _ in range(2):
        backend = _bug("generation_not_bumped").make_backend()
        try:
            runs.append(replay(bundle, backend))
        finally:
            backend.close()
    first, second = runs
    assert first.reproduced and second.reproduced
    assert first.narration == second.narration
    assert first.divergence == bundle["divergence"] == second.divergence


def test_model_free_bundle_holds_on_a_correct_store(recorded: Path, sqlite: Backend) -> None:
    result = replay(load_bundle(recorded), sqlite)
    assert not result.reproduced, result.message
    assert len(result.narration) == len(load_bundle(recorded)["steps"])


def test_replay_command_replays_in_the_recorded_machine(recorded: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`kit replay` exits 1 when the violation reproduces, 0 on a correct store; a bundle naming an unknown
    machine is bad input (2)."""
    assert kit_main(["replay", str(recorded)]) == 1
    out = capsys.readouterr().out
    assert "model-free machine" in out and "reproduced the recorded divergence" in out
    assert kit_main(["replay", str(recorded), "--backend", "sqlite"]) == 0
    assert "every invariant held" in capsys.readouterr().out
    odd = recorded.with_name("odd.json")
    odd.write_text(json.dumps({**json.loads(recorded.read_text()), "machine": "oracle"}))
    assert kit_main(["replay", str(odd)]) == 2


# -- a store that withholds promises ------------------------------------------------
#: Stores that withhold promise families (tests.promise_stores): every operation of a withheld family raises
#: ``Withheld`` (the machine would then fail with an error), and withheld behaviours are really broken.
WITHHOLDING = {
    "no-timers": lambda: WithholdingBackend([Promise.TIMERS]),
    "no-test-clock": lambda: WithholdingBackend(test_clock=False),
    "no-fencing-no-revisions": lambda: WithholdingBackend([Promise.GENERATION_FENCING, Promise.EXPECTED_REVISION]),
    "durable-functions-like": lambda: WithholdingBackend([Promise.LEASES, Promise.TIMERS, Promise.WAKE_ON_INPUT]),
    "token-fenced-no-timers": lambda: WithholdingBackend([Promise.TIMERS], tokens=True),
}


def test_selection_follows_the_promises(sqlite: Backend) -> None:
    """The reference-comparing machine for a store that promises everything, the model-free one otherwise;
    an explicit choice is taken as asked."""
    assert choose_machine(sqlite) == REFERENCE
    assert choose_machine(WithholdingBackend()) == REFERENCE
    assert choose_machine(WithholdingBackend([Promise.TIMERS])) == MODEL_FREE
    assert choose_machine(WithholdingBackend(test_clock=False)) == MODEL_FREE
    assert choose_machine(sqlite, MODEL_FREE) == MODEL_FREE
    assert choose_machine(WithholdingBackend([Promise.TIMERS]), REFERENCE) == REFERENCE
    with pytest.raises(ConfigurationError, match="model-free"):
        choose_machine(sqlite, "oracle")
    assert "timers" not in step_families(WithholdingBackend([Promise.TIMERS])) and "timers" in step_families(sqlite)
    assert "timers" not in step_families(sqlite, allowed=set(step_families(sqlite)) - {"timers"})


@pytest.mark.parametrize("make", WITHHOLDING.values(), ids=WITHHOLDING.keys())
def test_store_that_withholds_promises_gets_none_of_their_steps(make: Callable[[], WithholdingBackend]) -> None:
    """A store is never given an operation of a family it withholds (no timer fired, scheduled or waited for,
    no clock moved without a test clock, no lease renewed or outlived, no blocked decision without wake-up on
    input, no stale claim or unexpected revision without fencing), and keeps every invariant of what it does
    promise (a token-fenced store gets every claim token back untouched)."""
    backend = make()
    outcome = run_model_free(backend, Profile("small", max_examples=20, steps=30), SEED, shrink=False)
    assert outcome.error is None, outcome.error
    assert outcome.failure is None, outcome.failure["message"]
    kinds, withheld = outcome.extra["kinds"], backend.withheld
    assert kinds.get("commit") and kinds.get("claim_runs") and kinds.get("lost_ack") and kinds.get("crash")
    if Promise.TIMERS in withheld:
        assert {k: kinds[k] for k in TIMER_KINDS if k in kinds} == {}
    if Capability.TEST_CLOCK not in backend.capabilities.supported:
        assert not any(k.startswith("advance") for k in kinds), kinds
    if Promise.LEASES in withheld:
        assert "renew" not in kinds and "advance_to:lease" not in kinds


def test_check_command_takes_a_machine(capsys: pytest.CaptureFixture[str]) -> None:
    """`kit check --machine` names one of auto, reference, model-free; anything else is bad input (2)."""
    with pytest.raises(SystemExit) as exit_info:
        kit_main(["check", "memory", "--machine", "oracle"])
    assert exit_info.value.code == 2
    assert "--machine" in capsys.readouterr().err


def test_conformance_check_runs_the_selected_machine_and_saves_a_replayable_bundle(tmp_path: Path) -> None:
    """`--kit-machine model-free` runs the model-free check (the reference one is skipped, saying how to run it);
    its failure saves a bundle recording the machine, which `kit replay` reproduces."""
    from kit.runner import run_suite

    bug = _bug("generation_not_bumped")
    spec = f"tests.seeded_bugs.registry:{bug.name}"
    backend = bug.make_backend()
    try:
        run = run_suite(backend, keyword="fault_machine", extra_args=[
            "--kit-machine", MODEL_FREE, "--kit-profile", "quick", "--kit-seed", str(SEED),
            "--kit-seeds-dir", str(tmp_path), "--kit-backend", spec])
    finally:
        backend.close()
    outcomes = {r.check: r for r in run.results}
    assert outcomes["machines.fault_machine_agrees_with_reference"].outcome == "skipped"
    assert "--machine reference" in outcomes["machines.fault_machine_agrees_with_reference"].message
    failed = outcomes["machines.fault_machine_keeps_the_invariants"]
    assert failed.outcome == "failed" and "(invariant 4)" in failed.message
    (saved,) = tmp_path.glob("*.json")
    assert load_bundle(saved)["machine"] == MODEL_FREE
    assert kit_main(["replay", str(saved)]) == 1
