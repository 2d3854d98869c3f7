"""The queue profile: the reference queue passes everything; seeded-bug queues are killed by the
queue checks and by the queue machine, whose failures save a bundle that replays."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.backends import resolve
from kit.contract.capabilities import SkipKind
from kit.machines.bundle import load_bundle, make_bundle, replay, save_bundle
from kit.machines.queue_machine import run_queue_machine
from kit.queue import QueuePromise, is_queue_backend
from kit.queue.reference import MemoryQueueBackend
from kit.runner import run_suite
from tests.seeded_bugs.queue_bugs import QUEUE_BUGS, QueueBug

SEED = 20261129


def test_reference_queue_passes_every_queue_check() -> None:
    run = run_suite(MemoryQueueBackend(), extra_args=["--kit-seed", str(SEED)])
    assert run.ok, [(r.check, r.message) for r in run.failed]
    outcomes = {r.check: r.outcome for r in run.results}
    assert set(outcomes.values()) == {"passed"}, outcomes
    assert "queue_machines.queue_fault_machine_keeps_invariants" in outcomes
    assert len(outcomes) >= 18


def test_kit_check_picks_the_queue_profile_from_the_factory() -> None:
    backend = resolve("kit.queue.reference:MemoryQueueBackend")
    assert is_queue_backend(backend)
    run = run_suite(backend, keyword="keyed_enqueue")
    assert [r.check for r in run.results] == ["queue.keyed_enqueue_deduplicates"]


def test_an_undeclared_promise_is_skipped_as_not_promised() -> None:
    backend = MemoryQueueBackend()
    backend.queue_promises = backend.queue_promises.without(QueuePromise.DEDUP_KEYS)
    run = run_suite(backend, keyword="keyed_enqueue")
    [result] = run.results
    assert result.outcome == "skipped" and result.skip_kind == SkipKind.NOT_PROMISED.value, result


@pytest.mark.parametrize("bug", QUEUE_BUGS, ids=[b.name for b in QUEUE_BUGS])
def test_queue_checks_kill_seeded_bug(bug: QueueBug) -> None:
    keyword = " or ".join(c.split(".", 1)[1] for c in bug.caught_by)
    run = run_suite(bug.make_backend(), keyword=keyword, extra_args=["--kit-profile", "none"])
    failed = {r.check for r in run.failed}
    assert failed & set(bug.caught_by), f"{bug.name} survived {bug.caught_by}: results {run.results}"


@pytest.mark.parametrize("bug", [b for b in QUEUE_BUGS if b.machine_kind],
                         ids=[b.name for b in QUEUE_BUGS if b.machine_kind])
def test_queue_machine_kills_seeded_bug_and_its_bundle_replays(bug: QueueBug, tmp_path: Path) -> None:
    backend = bug.make_backend()
    outcome = run_queue_machine(backend, "quick", SEED)
    assert outcome.error is None, outcome.error
    assert outcome.failure is not None, f"the queue machine missed {bug.name} in {outcome.examples} examples"
    assert outcome.failure["divergence"]["kind"] == bug.machine_kind, outcome.failure["message"]
    assert len(outcome.failure["steps"]) <= 12, f"shrinking left {len(outcome.failure['steps'])} steps"
    bundle = make_bundle(bug.name, backend, "quick", SEED, outcome.failure["steps"],  # type: ignore[arg-type]
                         outcome.failure["divergence"])
    bundle["kind"] = "queue"
    loaded = load_bundle(save_bundle(bundle, tmp_path))
    replayed = replay(loaded, backend)  # type: ignore[arg-type]
    assert replayed.reproduced and replayed.divergence is not None
    assert replayed.divergence["kind"] == bug.machine_kind
    assert replay(loaded, MemoryQueueBackend()).divergence is None, "the bundle fails the correct queue too"  # type: ignore[arg-type]


def test_queue_machine_kills_a_claim_race() -> None:
    """The claim that reads its candidate and marks it running in two steps hands one job to two racing workers:
    the machine's racing claims (several threads at once, many times per run) catch it."""
    bug = next(b for b in QUEUE_BUGS if b.name == "racy_claim")
    outcome = run_queue_machine(bug.make_backend(), "quick", SEED, shrink=False)
    assert outcome.failure is not None, f"the queue machine missed racy_claim in {outcome.examples} examples"
    assert outcome.failure["divergence"]["kind"] == "double_claim", outcome.failure["message"]


def test_queue_machine_passes_the_reference_queue() -> None:
    outcome = run_queue_machine(MemoryQueueBackend(), "quick", SEED)
    assert outcome.ok, (outcome.failure, outcome.error)
    assert outcome.examples >= 20
