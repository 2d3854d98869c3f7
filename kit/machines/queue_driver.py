"""The queue fault machine's driver: applies JSON steps to a queue store and checks invariants.

Model-free: no reference queue is consulted. After every step the driver checks
only what the queue profile promises on the store's observable state and
answers:

* nothing acknowledged is lost (every enqueued job is still listed);
* a finished job stays finished (status and attempts never change again);
* at most one live claim per job (a claim never hands out a job another live claim holds);
* a live claim's job stays running until its holder or ``recover()`` ends it;
* with ``dedup_keys``: an enqueue with the key of a waiting job creates nothing;
* a live claim's heartbeat, completion and failure are accepted (an acknowledgement is never lost),
  and no store call on a legitimate step raises;
* with ``fenced_acks``: a stale claim's heartbeat, completion or failure is refused;
* with ``retry_backoff`` / ``delayed_jobs``: nothing is claimed before its time (store clock);
* with ``retry_limit``: no retry is scheduled once ``max_attempts`` attempts have ended;
* with ``stalled_recovery``: recover() never takes a job whose worker heartbeat within the stall time;
* attempts never decrease; get and list agree.

Time bounds are proved from store-clock readings that bracket each call, so a
slow machine can hide a violation but never invent one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from kit.contract.errors import StorageError
from kit.contract.outcomes import Outcome
from kit.machines import progress
from kit.queue import (
    Job,
    JobClaim,
    JobStatus,
    QueueBackend,
    QueueDatabase,
    QueuePolicy,
    QueuePromise,
    QueueStore,
)

__all__ = ["MACHINE_POLICY", "QueueDriver", "QueueViolation"]

MACHINE_POLICY = QueuePolicy(max_attempts=3, backoff=timedelta(hours=1))
"""The machine's queue policy: a backoff no run on the database clock outlives."""

RACE_TIMEOUT_S = 60.0
"""A safety net only: racing claims are single statements."""

_ACCEPTED = {Outcome.COMPLETED, Outcome.RETRY_SCHEDULED, Outcome.FAILED, Outcome.RENEWED}


class QueueViolation(AssertionError):
    """An invariant broken at step ``step`` (index in the step list)."""

    def __init__(self, step: int, kind: str, message: str) -> None:
        super().__init__(f"step {step}: {message}")
        self.step = step
        self.kind = kind
        progress.diverged()
        self.detail = message

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "kind": self.kind, "message": self.detail}


@dataclass
class _Claim:
    claim: JobClaim
    beat_lower: datetime
    """A store-clock reading taken before the claim's last sign of life (claim or heartbeat)."""


@dataclass
class QueueDriver:
    backend: QueueBackend
    database: QueueDatabase
    narrate: Callable[[str], None] | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    claims: list[_Claim] = field(default_factory=list)
    crashed: set[str] = field(default_factory=set)
    _acked: set[str] = field(default_factory=set)
    _final: dict[str, Job] = field(default_factory=dict)
    _live: dict[str, int] = field(default_factory=dict)
    _not_before: dict[str, datetime] = field(default_factory=dict)
    _attempts: dict[str, int] = field(default_factory=dict)
    _waiting_keys: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.store: QueueStore = self.database.open(MACHINE_POLICY)
        self.promised = self.backend.queue_promises
        progress.example_started()

    def close(self) -> None:
        self.store.close()

    def has(self, promise: QueuePromise) -> bool:
        return promise in self.promised

    def live_claims(self) -> list[int]:
        return sorted(self._live.values())

    # -- stepping -----------------------------------------------------------
    def apply(self, step: dict[str, Any]) -> None:
        self.steps.append(step)
        progress.step_applied()
        index = len(self.steps) - 1
        op = step["op"]
        try:
            said = getattr(self, f"_{op}")(index, step)
        except StorageError as exc:
            self._violation(index, "store_error", f"{op} raised {type(exc).__name__}: {exc}")
        if self.narrate is not None:
            self.narrate(f"{index:3d} {op} {_args(step)} -> {said}")
        self._check_state(index)

    def _violation(self, index: int, kind: str, message: str) -> None:
        raise QueueViolation(index, kind, message)

    def _enqueue(self, index: int, step: dict[str, Any]) -> str:
        before = self.store.now()
        delay = timedelta(seconds=step["delay_s"]) if step.get("delay_s") else None
        key = step.get("key")
        result = self.store.enqueue(step["queue"], "task", step.get("payload"), key=key, delay=delay)
        self._acked.add(result.job.job_id)
        if result.created and key in self._waiting_keys and self.has(QueuePromise.DEDUP_KEYS):
            self._violation(index, "dedup_broken", f"enqueue with key {key!r} created job {result.job.job_id} "
                            "while a job with that key was waiting")
        if delay is not None and result.created and self.has(QueuePromise.DELAYED_JOBS):
            self._not_before[result.job.job_id] = before + delay
        return f"job {result.job.job_id} ({'created' if result.created else 'deduplicated'})"

    def _claim(self, index: int, step: dict[str, Any]) -> str:
        before = self.store.now()
        claim = self.store.claim(step["worker"])
        if claim is None:
            return "nothing"
        return self._record_claim(index, claim, before)

    def _claim_race(self, index: int, step: dict[str, Any]) -> str:
        """Several workers claim at once, each through its own store on its own thread (started together):
        no job may go to two of them."""
        workers: list[str] = list(step["workers"])
        stores = [self.database.open(MACHINE_POLICY) for _ in workers]
        try:
            before = self.store.now()
            got: list[Any] = [None] * len(workers)
            barrier = threading.Barrier(len(workers))

            def claim(i: int) -> None:
                try:
                    barrier.wait(RACE_TIMEOUT_S)
                    got[i] = stores[i].claim(workers[i])
                except Exception as exc:  # noqa: BLE001 - re-raised below, on the driver's thread
                    got[i] = exc
            threads = [threading.Thread(target=claim, args=(i,), daemon=True) for i in range(len(workers))]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(RACE_TIMEOUT_S)
            if any(thread.is_alive() for thread in threads):
                self._violation(index, "store_error", f"racing claims did not finish within {RACE_TIMEOUT_S:g} s")
        finally:
            for store in stores:
                store.close()
        said = []
        for answer in got:
            if isinstance(answer, BaseException):
                raise answer
            said.append("nothing" if answer is None else self._record_claim(index, answer, before))
        return " | ".join(said)

    def _record_claim(self, index: int, claim: JobClaim, before: datetime) -> str:
        job = claim.job_id
        if job in self._final:
            self._violation(index, "terminal_claimed", f"{claim.worker} claimed job {job}, which had ended "
                       f"{self._final[job].status.value}")
        held = self._live.get(job)
        if held is not None:
            other = self.claims[held].claim
            self._violation(index, "double_claim", f"{claim.worker} claimed job {job} while claim #{held} of "
                       f"{other.worker} was still live (not finished, not recovered)")
        due = self._not_before.get(job)
        after = self.store.now() if due is not None else None  # read only when a bound needs it
        if due is not None and after is not None and after < due:
            self._violation(index, "claimed_early", f"{claim.worker} claimed job {job} at {after} or earlier, "
                       f"before its time {due} (backoff or delay)")
        self._not_before.pop(job, None)
        self.claims.append(_Claim(claim, before))
        self._live[job] = len(self.claims) - 1
        return f"claim #{len(self.claims) - 1} on job {job}"

    def _heartbeat(self, index: int, step: dict[str, Any]) -> str:
        number = step["claim"]
        held = self.claims[number]
        before = self.store.now()
        answer = self.store.heartbeat(held.claim)
        live = self._live.get(held.claim.job_id) == number
        if live and answer is not Outcome.RENEWED:
            self._violation(index, "live_ack_refused", f"the heartbeat of live claim #{number} answered {answer.value}")
        if answer is Outcome.RENEWED:
            if not live and self.has(QueuePromise.FENCED_ACKS):
                self._violation(index, "stale_effect", f"the heartbeat of stale claim #{number} was accepted")
            if live:
                held.beat_lower = before
        return answer.value

    def _complete(self, index: int, step: dict[str, Any]) -> str:
        number = step["claim"]
        claim = self.claims[number].claim
        live = self._live.get(claim.job_id) == number
        answers = [self.store.complete(claim, {"by": claim.worker})]
        if step.get("lost_ack"):
            answers.append(self.store.complete(claim, {"by": claim.worker}))
        if live and answers[0] is not Outcome.COMPLETED:
            self._violation(index, "live_ack_refused", f"the completion of live claim #{number} (job "
                            f"{claim.job_id}) answered {answers[0].value}")
        if answers[0] is Outcome.COMPLETED:
            if not live and self.has(QueuePromise.FENCED_ACKS):
                self._violation(index, "stale_effect", f"stale claim #{number} of {claim.worker} completed job "
                           f"{claim.job_id}")
            self._end(claim.job_id)
        return "/".join(a.value for a in answers)

    def _fail(self, index: int, step: dict[str, Any]) -> str:
        number = step["claim"]
        claim = self.claims[number].claim
        live = self._live.get(claim.job_id) == number
        before = self.store.now()
        answer = self.store.fail(claim, {"by": claim.worker}, retry=step["retry"])
        if live and answer not in (Outcome.RETRY_SCHEDULED, Outcome.FAILED):
            self._violation(index, "live_ack_refused", f"the failure of live claim #{number} (job "
                            f"{claim.job_id}) answered {answer.value}")
        if answer in (Outcome.RETRY_SCHEDULED, Outcome.FAILED):
            if not live and self.has(QueuePromise.FENCED_ACKS):
                self._violation(index, "stale_effect", f"stale claim #{number} of {claim.worker} failed job {claim.job_id}")
            self._end(claim.job_id)
        if answer is Outcome.RETRY_SCHEDULED:
            if not step["retry"]:
                self._violation(index, "unasked_retry", f"a failure asking for no retry re-queued job {claim.job_id}")
            job = self.store.get(claim.job_id)
            if live and job is not None and self.has(QueuePromise.RETRY_LIMIT) \
                    and job.attempts >= MACHINE_POLICY.max_attempts:
                self._violation(index, "retry_beyond_limit", f"job {claim.job_id} was re-queued after {job.attempts} "
                           f"attempts, max_attempts {MACHINE_POLICY.max_attempts}")
            if self.has(QueuePromise.RETRY_BACKOFF):
                self._not_before[claim.job_id] = before + MACHINE_POLICY.backoff
        return answer.value

    def _crash(self, index: int, step: dict[str, Any]) -> str:
        self.crashed.add(step["worker"])
        return "stops heartbeating; its claims are now a zombie's"

    def _elapse(self, index: int, step: dict[str, Any]) -> str:
        return str(self.store.advance_clock(timedelta(seconds=step["seconds"])))

    def _recover(self, index: int, step: dict[str, Any]) -> str:
        stall = timedelta(seconds=step["stalled_after_s"])
        recovered = self.store.recover(stall)
        after = self.store.now()
        for job in recovered:
            if job in self._final:
                self._violation(index, "terminal_recovered", f"recover() took job {job}, which had ended")
            number = self._live.get(job)
            if number is not None and self.has(QueuePromise.STALLED_RECOVERY):
                beat = self.claims[number].beat_lower
                if after - beat < stall:
                    self._violation(index, "live_recovered", f"recover({stall}) took job {job} from claim #{number}, "
                               f"whose worker gave a sign of life at {beat} or later (now {after} at most)")
            self._end(job)
            self._not_before.pop(job, None)
        return f"recovered {recovered}"

    def _end(self, job: str) -> None:
        self._live.pop(job, None)

    # -- invariants on the observable state -----------------------------------
    def _check_state(self, index: int) -> None:
        jobs = self.store.list()
        by_id = {j.job_id: j for j in jobs}
        lost = sorted(self._acked - set(by_id))
        if lost:
            self._violation(index, "lost_job", f"acknowledged jobs {lost} are gone from list()")
        for job_id, final in self._final.items():
            now = by_id[job_id]
            if (now.status, now.attempts) != (final.status, final.attempts):
                self._violation(index, "terminal_changed", f"job {job_id} had ended {final.status.value} after "
                           f"{final.attempts} attempts and is now {now.status.value} after {now.attempts}")
        for job in jobs:
            if job.attempts < self._attempts.get(job.job_id, 0):
                self._violation(index, "attempts_decreased", f"job {job.job_id}'s attempts went from "
                           f"{self._attempts[job.job_id]} to {job.attempts}")
            self._attempts[job.job_id] = job.attempts
            if job.status.terminal:
                self._final.setdefault(job.job_id, job)
                self._live.pop(job.job_id, None)  # ended by someone: a non-fenced stale ack, say
        for job_id, number in self._live.items():
            held = by_id.get(job_id)
            if held is None or held.status is not JobStatus.RUNNING:
                self._violation(index, "live_claim_lost", f"job {job_id} is {held.status.value if held else 'gone'} "
                           f"while claim #{number} still holds it (nobody finished or recovered it)")
        self._waiting_keys = {j.key for j in jobs if j.key is not None and j.status is JobStatus.QUEUED}
        for job in jobs[index % len(jobs):][:1] if jobs else ():  # one job per step, in turn
            got = self.store.get(job.job_id)
            if got != job:
                self._violation(index, "get_list_disagree", f"get({job.job_id}) returned {got}, list showed {job}")


def _args(step: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in step.items() if k != "op")
