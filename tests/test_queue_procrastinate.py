"""procrastinate through the queue profile, against the local PostgreSQL.

The expected result is the kit's finding, not a wish: procrastinate passes every check of a
promise it makes except the two weaknesses described in README ("What the kit found in
third-party stores"), and the fenced-acknowledgement checks are skipped as not promised.
"""

from __future__ import annotations

import pytest

pytest.importorskip("procrastinate", reason="procrastinate is not installed: pip install "
                    "'durable-storage-kit[procrastinate]' (the test extra installs it)")

from kit.contract.capabilities import SkipKind
from kit.pytest_plugin import skip_module_unless_reachable
from kit.queue import JobStatus, QueuePromise
from kit.runner import run_suite

skip_module_unless_reachable("postgres")

from adapters.thirdparty.procrastinate import PROMISES, discover

FINDINGS = {
    # a late retry re-queues a job that failed for good (retry_job accepts 'failed' jobs)
    "queue.fail_without_retry_fails_for_good",
    # a retry of a job whose queueing lock a newer waiting job took raises UniqueViolation
    "queue.retry_is_not_blocked_by_a_newer_job_with_its_key",
    # the queue machine finds the first of the two on its own
    "queue_machines.queue_fault_machine_keeps_invariants",
}


def test_procrastinate_declares_what_it_promises() -> None:
    assert QueuePromise.FENCED_ACKS not in PROMISES and QueuePromise.TEST_CLOCK not in PROMISES
    assert QueuePromise.STALLED_RECOVERY in PROMISES and QueuePromise.DEDUP_KEYS in PROMISES


def test_procrastinate_round_trip_through_its_own_code() -> None:
    backend = discover()
    try:
        database = backend.provision()
        store = database.open()
        try:
            job = store.enqueue("default", "send", {"to": "a@example.org", "n": [1, 2]}, key="k").job
            assert store.enqueue("default", "send", {}, key="k").job.job_id == job.job_id
            claim = store.claim("w1", ["default"])
            assert claim is not None and claim.payload == {"to": "a@example.org", "n": [1, 2]}
            assert store.get(job.job_id) is not None
            assert store.list(status=JobStatus.RUNNING)[0].worker == "w1"
            database.reset()  # type: ignore[attr-defined]
            assert store.list() == []
        finally:
            store.close()
            database.drop()
    finally:
        backend.close()


def test_kit_check_on_procrastinate_reports_its_findings_and_nothing_else() -> None:
    backend = discover()
    try:
        run = run_suite(backend, extra_args=["--kit-seed", "20261129", "--kit-seeds-dir", "/tmp/kit-seeds"])
    finally:
        backend.close()
    assert not run.collection_errors, run.collection_errors
    by_check = {r.check: r for r in run.results}
    failed = {r.check for r in run.failed}
    unexplained = failed - FINDINGS
    assert not unexplained, [(c, by_check[c].message) for c in sorted(unexplained)]
    must_fail = FINDINGS - {"queue_machines.queue_fault_machine_keeps_invariants"}
    assert must_fail <= failed, f"a finding no longer reproduces: {sorted(must_fail - failed)} passed"
    skipped = {r.check: r for r in run.results if r.outcome == "skipped"}
    assert skipped and all(r.skip_kind == SkipKind.NOT_PROMISED.value for r in skipped.values()), skipped
    assert all("fenced_acks" in r.message for r in skipped.values())
    assert sum(r.outcome == "passed" for r in run.results) >= 14
