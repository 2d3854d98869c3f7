"""Queue claims: one live claim per job, finished jobs stay finished, stalled workers, stale acks."""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import timedelta

from kit.conformance._harness import Threads
from kit.conformance.queue._harness import QueueAreaChecks, elapse, promises
from kit.contract.outcomes import Outcome
from kit.queue import JobStatus, QueueBackend, QueuePromise, QueueStore

__all__ = ["QueueClaimChecks"]

_REFUSED = {Outcome.CLAIM_LOST, Outcome.TERMINAL, Outcome.NOT_FOUND, Outcome.DUPLICATE}


class QueueClaimChecks(QueueAreaChecks):
    area = "queue"

    def test_enqueue_then_get_and_list(self, store: QueueStore) -> None:
        """An enqueued job is queued with no attempts, and get and list return it as enqueued."""
        payload = {"n": 1, "s": "é", "xs": [1, 2.5, None, True]}
        enqueued = store.enqueue("default", "send-mail", payload)
        assert enqueued.created, "a first enqueue reported that it created nothing"
        job = enqueued.job
        assert job.status is JobStatus.QUEUED and job.attempts == 0, f"a new job is {job.status}/{job.attempts}"
        got = store.get(job.job_id)
        assert got == job, f"get returned {got}, enqueue returned {job}"
        assert got.payload == payload, f"payload came back as {got.payload!r}"
        assert store.list() == [job], "list does not show exactly the one enqueued job"
        assert store.get("999999999") is None, "get of an unknown job id returned a job"

    def test_claim_holds_the_job_exclusively(self, store: QueueStore) -> None:
        """A claim marks the job running for its worker, and no other claim gets it while it runs."""
        job = store.enqueue("default", "t", {"n": 1}).job
        claim = self.claim_job(store, "w1")
        assert claim.job_id == job.job_id and claim.attempt == 1 and claim.payload == {"n": 1}
        got = store.get(job.job_id)
        assert got is not None and got.status is JobStatus.RUNNING, f"a claimed job is {got}"
        again = store.claim("w2")
        assert again is None, f"a second worker claimed job {again.job_id} while w1 held it" if again else ""

    def test_claim_only_from_named_queues(self, store: QueueStore) -> None:
        """A claim naming queues only takes jobs of those queues."""
        store.enqueue("emails", "t", 1)
        store.enqueue("reports", "t", 2)
        claim = self.claim_job(store, "w1", ["reports"])
        assert claim.queue == "reports", f"a claim on ['reports'] took a job of {claim.queue!r}"
        assert store.claim("w2", ["reports"]) is None, "a claim took a second job from a queue with one job"

    def test_completed_job_stays_completed(self, store: QueueStore) -> None:
        """A completed job stays succeeded: a repeated completion (a lost acknowledgement), a late
        failure and another claim change nothing."""
        store.enqueue("default", "t")
        claim = self.claim_job(store)
        assert store.complete(claim, {"ok": True}) is Outcome.COMPLETED
        before = store.get(claim.job_id)
        assert before is not None and before.status is JobStatus.SUCCEEDED, f"a completed job is {before}"
        again = store.complete(claim, {"ok": True})
        assert again in _REFUSED, f"a repeated completion answered {again.value}"
        late = store.fail(claim, {"err": "late"}, retry=True)
        assert late in _REFUSED, f"a failure after completion answered {late.value}"
        store.heartbeat(claim)  # whether a finished claim's heartbeat is refused is fenced_acks' business
        assert store.claim("w2") is None, "a completed job was claimed again"
        assert store.get(claim.job_id) == before, "a completed job changed after a refused call"

    def test_fail_without_retry_fails_for_good(self, store: QueueStore) -> None:
        """A failure that asks for no retry fails the job for good: never claimable again, and a late
        completion or a late failure asking for a retry (a repeated acknowledgement) changes nothing."""
        store.enqueue("default", "t")
        claim = self.claim_job(store)
        assert store.fail(claim, {"err": "boom"}, retry=False) is Outcome.FAILED
        job = store.get(claim.job_id)
        assert job is not None and job.status is JobStatus.FAILED, f"a job failed for good is {job}"
        assert store.claim("w2") is None, "a job that failed for good was claimed again"
        assert store.complete(claim) in _REFUSED, "a failed job accepted a completion"
        late = store.fail(claim, {"err": "again"}, retry=True)
        assert late in _REFUSED, f"a late failure asking for a retry answered {late.value}"
        assert store.get(claim.job_id) == job, "a job that failed for good changed after a refused call"

    def test_list_and_get_agree(self, store: QueueStore) -> None:
        """list (whole, by queue, by status) and get show the same jobs in the same states."""
        ids = [store.enqueue("a" if i % 2 else "b", "t", i).job.job_id for i in range(6)]
        first = self.claim_job(store, "w1")
        store.complete(first)
        second = self.claim_job(store, "w1")
        store.fail(second, retry=False)
        self.claim_job(store, "w2")
        listed = store.list()
        assert [j.job_id for j in listed] == ids, "list lost, added or reordered jobs (enqueue order)"
        for job in listed:
            assert store.get(job.job_id) == job, f"get({job.job_id}) disagrees with list"
        for status in JobStatus:
            assert store.list(status=status) == [j for j in listed if j.status is status], f"list(status={status})"
        assert store.list(queue="a") == [j for j in listed if j.queue == "a"], "list(queue='a')"
        counts = {s: len(store.list(status=s)) for s in JobStatus}
        assert counts == {JobStatus.QUEUED: 3, JobStatus.RUNNING: 1, JobStatus.SUCCEEDED: 1, JobStatus.FAILED: 1}

    @promises(QueuePromise.CONCURRENT_CONNECTIONS)
    def test_concurrent_claimers_never_share_a_job(self, open_store: Callable[..., QueueStore]) -> None:
        """Claimers racing on their own connections never get the same job, and together get them all."""
        jobs, claimers = 24, 4
        setup = open_store()
        ids = {setup.enqueue("default", "t", i).job.job_id for i in range(jobs)}
        stores = [open_store() for _ in range(claimers)]

        def drain(store: QueueStore, worker: str) -> list[str]:
            taken = []
            for _ in range(jobs + 1):  # a store that hands out held jobs must not loop forever
                claim = store.claim(worker)
                if claim is None:
                    break
                taken.append(claim.job_id)
            return taken

        taken = Threads.run([functools.partial(drain, s, f"w{i}") for i, s in enumerate(stores)])
        flat = [job_id for part in taken for job_id in part]
        shared = sorted({j for j in flat if flat.count(j) > 1})
        assert not shared, f"jobs {shared} were handed to two claimers at once"
        assert set(flat) == ids, f"jobs {sorted(ids - set(flat))} were never claimed"

    @promises(QueuePromise.SERIAL_LOCKS)
    def test_jobs_sharing_a_lock_never_run_at_once(self, store: QueueStore) -> None:
        """While a job with lock L runs, another job with lock L is not claimable; after it ends, it is."""
        first = store.enqueue("default", "t", 1, lock="account-7").job
        second = store.enqueue("default", "t", 2, lock="account-7").job
        claim = self.claim_job(store, "w1")
        assert claim.job_id == first.job_id
        other = store.claim("w2")
        assert other is None, f"job {other.job_id} ran beside job {first.job_id} under the same lock" if other else ""
        assert store.complete(claim) is Outcome.COMPLETED
        after = self.claim_job(store, "w2")
        assert after.job_id == second.job_id

    @promises(QueuePromise.STALLED_RECOVERY)
    def test_crashed_workers_job_is_recovered(self, store: QueueStore, kit_backend: QueueBackend) -> None:
        """A worker that died holding a job (no heartbeat for the stall time) loses it to recover(),
        which re-queues it for another worker."""
        job = store.enqueue("default", "t").job
        self.claim_job(store, "w1")
        stall = timedelta(seconds=1)
        elapse(store, stall * 1.5, kit_backend)
        recovered = store.recover(stall)
        assert job.job_id in recovered, f"recover({stall}) left the crashed worker's job (got {recovered})"
        got = store.get(job.job_id)
        assert got is not None and got.status is JobStatus.QUEUED, f"a recovered job is {got}"
        claim = self.claim_job(store, "w2")
        assert claim.job_id == job.job_id and claim.attempt >= 2, f"re-claim of a recovered job: {claim}"

    @promises(QueuePromise.STALLED_RECOVERY)
    def test_heartbeating_worker_keeps_its_job(self, store: QueueStore, kit_backend: QueueBackend) -> None:
        """A worker that heartbeats within the stall time keeps its job: recover() leaves it running."""
        stall = timedelta(seconds=2)
        for _ in range(3):  # on the database clock a paused machine can make a try inconclusive
            job = store.enqueue("default", "t").job
            claim = self.claim_job(store, "w1")
            elapse(store, stall * 0.6, kit_backend)
            beat_at = store.now()
            assert store.heartbeat(claim) is Outcome.RENEWED, "a live worker's heartbeat was refused"
            elapse(store, stall * 0.6, kit_backend)
            recovered = store.recover(stall)
            if store.now() - beat_at >= stall:
                store.complete(claim)
                continue  # more than the stall time passed since the heartbeat: proves nothing
            assert job.job_id not in recovered, f"recover({stall}) took a job whose worker heartbeat since"
            got = store.get(job.job_id)
            assert got is not None and got.status is JobStatus.RUNNING, f"a heartbeating worker's job is {got}"
            return
        raise AssertionError("three tries were inconclusive: the machine paused longer than the stall time")

    @promises(QueuePromise.FENCED_ACKS)
    def test_finished_claim_is_refused(self, store: QueueStore) -> None:
        """Once a job is completed, its claim's heartbeat, completion and failure are all refused."""
        store.enqueue("default", "t")
        claim = self.claim_job(store)
        assert store.complete(claim) is Outcome.COMPLETED
        for name, answer in (("heartbeat", store.heartbeat(claim)), ("complete", store.complete(claim)),
                             ("fail", store.fail(claim, retry=True))):
            assert answer in _REFUSED, f"the {name} of a completed job's claim answered {answer.value}"

    @promises(QueuePromise.STALLED_RECOVERY, QueuePromise.FENCED_ACKS)
    def test_stale_worker_cannot_complete(self, open_store: Callable[..., QueueStore],
                                          kit_backend: QueueBackend) -> None:
        """A worker whose job was recovered and re-claimed cannot complete, fail or heartbeat it any
        more; the new holder's claim is untouched and completes."""
        store = open_store()
        job = store.enqueue("default", "t").job
        stale = self.claim_job(store, "w1")
        elapse(store, timedelta(seconds=1.5), kit_backend)
        assert job.job_id in store.recover(timedelta(seconds=1))
        fresh = self.claim_job(store, "w2")
        for name, answer in (("complete", store.complete(stale, {"by": "w1"})),
                             ("fail", store.fail(stale, {"by": "w1"}, retry=False)),
                             ("heartbeat", store.heartbeat(stale))):
            assert answer in _REFUSED, f"the stale worker's {name} answered {answer.value}"
        got = store.get(job.job_id)
        assert got is not None and got.status is JobStatus.RUNNING and got.worker == "w2", \
            f"after the stale worker's calls the job is {got}"
        assert store.complete(fresh) is Outcome.COMPLETED, "the new holder could not complete"

    @promises(QueuePromise.STALLED_RECOVERY, QueuePromise.FENCED_ACKS)
    def test_stale_worker_cannot_complete_a_requeued_job(self, store: QueueStore,
                                                         kit_backend: QueueBackend) -> None:
        """A worker whose job was recovered (and is waiting again) cannot complete it: the job stays
        queued and runs again."""
        job = store.enqueue("default", "t").job
        stale = self.claim_job(store, "w1")
        elapse(store, timedelta(seconds=1.5), kit_backend)
        assert job.job_id in store.recover(timedelta(seconds=1))
        answer = store.complete(stale)
        assert answer in _REFUSED, f"the stale worker's completion of a re-queued job answered {answer.value}"
        got = store.get(job.job_id)
        assert got is not None and got.status is JobStatus.QUEUED, f"the re-queued job became {got}"
