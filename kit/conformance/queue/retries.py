"""Queue enqueues and retries: dedup keys, retry with backoff, attempts exhausted, delayed jobs."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from kit.conformance.queue._harness import QueueAreaChecks, elapse, promises
from kit.contract.outcomes import Outcome
from kit.queue import JobStatus, QueueBackend, QueuePolicy, QueuePromise, QueueStore

__all__ = ["QueueRetryChecks"]

_LONG = timedelta(hours=1)
_SHORT = timedelta(seconds=1)


class QueueRetryChecks(QueueAreaChecks):
    area = "queue"

    @promises(QueuePromise.DEDUP_KEYS)
    def test_keyed_enqueue_deduplicates(self, store: QueueStore) -> None:
        """Enqueueing twice with one key while the first job waits creates one job and returns it;
        another key creates another job."""
        first = store.enqueue("default", "t", {"n": 1}, key="order-42")
        second = store.enqueue("default", "t", {"n": 2}, key="order-42")
        assert first.created and not second.created, f"created flags {first.created}, {second.created}"
        assert second.job.job_id == first.job.job_id, "a keyed re-enqueue returned another job"
        other = store.enqueue("default", "t", {"n": 3}, key="order-43")
        assert other.created and other.job.job_id != first.job.job_id
        keyed = [j for j in store.list() if j.key == "order-42"]
        assert len(keyed) == 1, f"{len(keyed)} jobs hold key order-42"
        assert keyed[0].payload == {"n": 1}, "the duplicate enqueue overwrote the waiting job's payload"

    @promises(QueuePromise.DEDUP_KEYS, QueuePromise.RETRY_BACKOFF)
    def test_retry_is_not_blocked_by_a_newer_job_with_its_key(self, store: QueueStore) -> None:
        """A running keyed job whose key a newer waiting job took (legal: the first was no longer
        waiting) can still fail and be retried: the worker's acknowledgement is accepted, and the job
        does not stay running with nobody working on it."""
        first = store.enqueue("default", "t", 1, key="nightly-report").job
        claim = self.claim_job(store)
        newer = store.enqueue("default", "t", 2, key="nightly-report")
        assert newer.created, "a key blocked an enqueue although its job was running, not waiting"
        answer = store.fail(claim, {"err": "flaky"}, retry=True)
        assert answer in (Outcome.RETRY_SCHEDULED, Outcome.FAILED), f"the retry answered {answer.value}"
        got = store.get(first.job_id)
        assert got is not None and got.status is not JobStatus.RUNNING, f"after its retry the job is {got}"

    @promises(QueuePromise.RETRY_BACKOFF)
    def test_retry_waits_for_the_backoff(self, open_store: Callable[..., QueueStore]) -> None:
        """A failure asking for a retry re-queues the job with one more attempt, not claimable before
        the backoff has passed."""
        store = open_store(QueuePolicy(max_attempts=5, backoff=_LONG))
        job = store.enqueue("default", "t").job
        claim = self.claim_job(store)
        assert store.fail(claim, {"err": "flaky"}, retry=True) is Outcome.RETRY_SCHEDULED
        got = store.get(job.job_id)
        assert got is not None and got.status is JobStatus.QUEUED and got.attempts == 1, f"a retried job is {got}"
        early = store.claim("w2")
        assert early is None, f"a job retried with a backoff of {_LONG} was claimed at once"

    @promises(QueuePromise.RETRY_BACKOFF)
    def test_retry_runs_after_the_backoff(self, open_store: Callable[..., QueueStore],
                                          kit_backend: QueueBackend) -> None:
        """Once the backoff has passed (store clock) the retried job is claimable, as attempt 2."""
        store = open_store(QueuePolicy(max_attempts=5, backoff=_SHORT))
        job = store.enqueue("default", "t").job
        store.fail(self.claim_job(store), retry=True)
        elapse(store, _SHORT * 1.5, kit_backend)
        claim = self.claim_job(store, "w2")
        assert claim.job_id == job.job_id and claim.attempt == 2, f"the retry came back as {claim}"

    @promises(QueuePromise.RETRY_LIMIT)
    def test_exhausted_attempts_fail_for_good(self, open_store: Callable[..., QueueStore],
                                              kit_backend: QueueBackend) -> None:
        """With max_attempts 2, the second failed attempt fails the job for good even though it asked
        for a retry; it is never claimed again."""
        store = open_store(QueuePolicy(max_attempts=2, backoff=timedelta(0)))
        job = store.enqueue("default", "t").job
        assert store.fail(self.claim_job(store), retry=True) is Outcome.RETRY_SCHEDULED
        elapse(store, timedelta(seconds=0.1), kit_backend)
        second = self.claim_job(store, "w2")
        answer = store.fail(second, retry=True)
        assert answer is Outcome.FAILED, f"the last allowed attempt's failure answered {answer.value}"
        got = store.get(job.job_id)
        assert got is not None and got.status is JobStatus.FAILED and got.attempts == 2, f"the job is {got}"
        elapse(store, timedelta(seconds=0.1), kit_backend)
        assert store.claim("w3") is None, "a job with exhausted attempts was claimed again"

    @promises(QueuePromise.DELAYED_JOBS)
    def test_delayed_job_waits_for_its_time(self, store: QueueStore, kit_backend: QueueBackend) -> None:
        """A job enqueued with a delay is not claimable before it and is claimable after it."""
        late = store.enqueue("default", "t", "late", delay=_LONG).job
        early = store.claim("w1")
        assert early is None, f"job {early.job_id} was claimed an hour before its delay" if early else ""
        soon = store.enqueue("default", "t", "soon", delay=_SHORT).job
        elapse(store, _SHORT * 1.5, kit_backend)
        claim = self.claim_job(store, "w1")
        assert claim.job_id == soon.job_id, f"after {_SHORT} the claim took {claim.job_id}, not {soon.job_id}"
        assert store.claim("w2") is None, f"job {late.job_id} was claimed an hour early"
