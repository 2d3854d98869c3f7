"""The queue fault machine: Hypothesis drives a queue store through crashes, duplicate deliveries,
stale completions and lost acknowledgements; :class:`~kit.machines.queue_driver.QueueDriver`
checks the invariants after every step. Failures shrink, save a bundle (``kind: queue``) and replay.

Shrinking works on the recorded step list, not inside Hypothesis: remove chunks of steps, halving
the chunk, while the same invariant still breaks, within a time budget. A store on a real database
pays a round trip per call, and Hypothesis' own shrinker may take minutes there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from hypothesis import seed
from hypothesis import strategies as st
from hypothesis.database import ExampleDatabase
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule, run_state_machine_as_test

from kit.machines.bundle import ReplayResult
from kit.machines.collector import collecting_less
from kit.machines.machine import Profile, pinned_generation
from kit.machines.queue_driver import QueueDriver, QueueViolation
from kit.queue import QueueBackend, QueueDatabase, QueuePromise

__all__ = ["QUEUE_PROFILES", "QueueMachineOutcome", "replay_queue", "run_queue_machine"]

QUEUE_PROFILES = {
    "smoke": Profile("smoke", max_examples=10, steps=15),
    "quick": Profile("quick", max_examples=40, steps=25),
    "thorough": Profile("thorough", max_examples=200, steps=60),
}

WORKERS = ("w1", "w2", "w3")
QUEUES = ("default", "other")
KEYS = (None, None, "k1", "k2")
STALLS = (0, 1800, 7200)
"""Stall times for recover(), in seconds: everything, or (on a database clock) nothing yet."""


class _QueueMachine(RuleBasedStateMachine):
    backend: ClassVar[QueueBackend]
    failures: ClassVar[list[dict[str, Any]]]
    examples: ClassVar[list[int]]
    pool: ClassVar[list[QueueDatabase]]

    def __init__(self) -> None:
        super().__init__()
        type(self).examples[0] += 1
        self.driver = QueueDriver(self.backend, self._database())

    @classmethod
    def _database(cls) -> QueueDatabase:
        """One database per run, emptied between examples where the adapter can reset it."""
        if cls.pool and hasattr(cls.pool[0], "reset"):
            cls.pool[0].reset()
            return cls.pool[0]
        for old in cls.pool:
            old.drop()
        cls.pool[:] = [cls.backend.provision()]
        return cls.pool[0]

    def teardown(self) -> None:
        self.driver.close()

    def step(self, step: dict[str, Any]) -> None:
        try:
            self.driver.apply(step)
        except QueueViolation as exc:
            type(self).failures.append({"steps": list(self.driver.steps), "divergence": exc.to_json(),
                                        "message": str(exc), "example": type(self).examples[0]})
            raise

    def _pick(self, data: st.DataObject, crashed: bool | None = None) -> int:
        """A claim (held by a crashed worker, or not); the draw is the same whatever the state, so racing
        claims (which worker got which job is up to the threads) never change what is generated next."""
        index = data.draw(st.integers(0, 2**16), label="claim index")
        choices = [i for i, c in enumerate(self.driver.claims)
                   if crashed is None or (c.claim.worker in self.driver.crashed) == crashed]
        choices = choices or [len(self.driver.claims) - 1]
        return choices[index % len(choices)]

    @rule(queue=st.sampled_from(QUEUES), key=st.sampled_from(KEYS), delayed=st.booleans(),
          payload=st.integers(0, 9), twice=st.booleans())
    def enqueue(self, queue: str, key: str | None, delayed: bool, payload: int, twice: bool) -> None:
        step: dict[str, Any] = {"op": "enqueue", "queue": queue, "key": key, "payload": payload}
        if delayed and self.driver.has(QueuePromise.DELAYED_JOBS):
            step["delay_s"] = 3600
        self.step(step)
        if twice and key is not None:  # a duplicate delivery of the same enqueue
            self.step(dict(step))

    @rule(worker=st.sampled_from(WORKERS))
    def claim(self, worker: str) -> None:
        self.step({"op": "claim", "worker": worker})

    @precondition(lambda self: bool(self.driver.claims))
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        self.step({"op": "heartbeat", "claim": self._pick(data, crashed=False)})

    @precondition(lambda self: bool(self.driver.claims))
    @rule(data=st.data(), lost_ack=st.booleans())
    def complete(self, data: st.DataObject, lost_ack: bool) -> None:
        self.step({"op": "complete", "claim": self._pick(data), "lost_ack": lost_ack})

    @precondition(lambda self: bool(self.driver.claims))
    @rule(data=st.data(), retry=st.booleans())
    def fail(self, data: st.DataObject, retry: bool) -> None:
        self.step({"op": "fail", "claim": self._pick(data), "retry": retry})

    @precondition(lambda self: bool(self.driver.claims))
    @rule(data=st.data(), op=st.sampled_from(("complete", "fail", "heartbeat")))
    def zombie(self, data: st.DataObject, op: str) -> None:
        """A crashed worker wakes up and acts on a claim it held (a stale completion)."""
        step: dict[str, Any] = {"op": op, "claim": self._pick(data, crashed=True)}
        if op == "fail":
            step["retry"] = data.draw(st.booleans())
        self.step(step)

    @rule(worker=st.sampled_from(WORKERS), other=st.sampled_from(WORKERS), queue=st.sampled_from(QUEUES))
    def retry_then_claim(self, worker: str, other: str, queue: str) -> None:
        """A job is claimed and fails asking for a retry; another worker claims at once: the retry waits for
        its backoff (the steps the backoff promise needs, in one rule)."""
        self.step({"op": "enqueue", "queue": queue, "key": None, "payload": 0})
        claims = len(self.driver.claims)
        self.step({"op": "claim", "worker": worker})
        if len(self.driver.claims) > claims:
            self.step({"op": "fail", "claim": len(self.driver.claims) - 1, "retry": True})
        self.step({"op": "claim", "worker": other})

    @precondition(lambda self: self.driver.has(QueuePromise.STALLED_RECOVERY))
    @rule(worker=st.sampled_from(WORKERS), beat=st.booleans())
    def recover_beside_live(self, worker: str, beat: bool) -> None:
        """A worker claims (and maybe heartbeats) a job; the sweeper recovers jobs stalled for longer than the
        machine has run: the live worker keeps its job."""
        self.step({"op": "enqueue", "queue": "default", "key": None, "payload": 0})
        claims = len(self.driver.claims)
        self.step({"op": "claim", "worker": worker})
        if beat and len(self.driver.claims) > claims:
            self.step({"op": "heartbeat", "claim": len(self.driver.claims) - 1})
        self.step({"op": "recover", "stalled_after_s": STALLS[-1]})

    @rule(queue=st.sampled_from(QUEUES), key=st.sampled_from(KEYS[2:]), delayed=st.booleans())
    def keyed_enqueue_twice(self, queue: str, key: str, delayed: bool) -> None:
        """The same keyed enqueue delivered twice while the first job waits: one job."""
        self.enqueue(queue, key, delayed, 1, True)

    @precondition(lambda self: self.driver.has(QueuePromise.CONCURRENT_CONNECTIONS))
    @rule(workers=st.permutations(WORKERS), jobs=st.integers(1, 2))
    def claim_race(self, workers: list[str], jobs: int) -> None:
        """Waiting jobs, and every worker claims at once on its own connection: no job goes to two."""
        for payload in range(jobs):
            self.step({"op": "enqueue", "queue": "default", "key": None, "payload": payload})
        self.step({"op": "claim_race", "workers": list(workers)})

    @rule(worker=st.sampled_from(WORKERS))
    def crash(self, worker: str) -> None:
        self.step({"op": "crash", "worker": worker})

    @precondition(lambda self: self.driver.has(QueuePromise.TEST_CLOCK))
    @rule(seconds=st.sampled_from((60, 2400, 4000)))
    def elapse(self, seconds: int) -> None:
        self.step({"op": "elapse", "seconds": seconds})

    @precondition(lambda self: self.driver.has(QueuePromise.STALLED_RECOVERY))
    @rule(stall=st.sampled_from(STALLS))
    def recover(self, stall: int) -> None:
        self.step({"op": "recover", "stalled_after_s": stall})

    @precondition(lambda self: self.driver.has(QueuePromise.STALLED_RECOVERY))
    @rule(worker=st.sampled_from(WORKERS), other=st.sampled_from(WORKERS), stall=st.sampled_from(STALLS[:2]))
    def takeover(self, worker: str, other: str, stall: int) -> None:
        """A worker claims and dies, the sweeper recovers, another worker claims: the zombie's
        acknowledgements are now stale (the steps the machine needs most, in one rule)."""
        self.step({"op": "claim", "worker": worker})
        self.step({"op": "crash", "worker": worker})
        if self.driver.has(QueuePromise.TEST_CLOCK):
            self.step({"op": "elapse", "seconds": 2400})
        self.step({"op": "recover", "stalled_after_s": stall})
        self.step({"op": "claim", "worker": other})


@dataclass
class QueueMachineOutcome:
    backend: str
    profile: str
    seed: int
    examples: int
    seconds: float
    failure: dict[str, Any] | None = None
    error: str | None = None
    first_failing_example: int | None = None
    """The example (counted from 1, replayed ones first) in which the first failure showed."""

    @property
    def ok(self) -> bool:
        return self.failure is None and self.error is None


SHRINK_BUDGET_S = 20.0


def run_queue_machine(backend: QueueBackend, profile: str | Profile = "quick", seed_value: int = 0,
                      shrink: bool = True, example_db: ExampleDatabase | None = None) -> QueueMachineOutcome:
    """Run the queue machine against ``backend``; a failure is the first failing step list, shrunk. With an
    ``example_db``, the failures saved there are replayed first and new ones are saved."""
    chosen = QUEUE_PROFILES[profile] if isinstance(profile, str) else profile
    machine: type[_QueueMachine] = type("QueueMachine", (_QueueMachine,), {
        "backend": backend, "failures": [], "examples": [0], "pool": []})
    seed(seed_value)(machine)
    started = time.monotonic()
    outcome = QueueMachineOutcome(getattr(backend, "name", "?"), chosen.name, seed_value, 0, 0.0)
    try:
        with pinned_generation(), collecting_less():  # one seed, one scenario, whatever modules are loaded
            run_state_machine_as_test(machine, settings=chosen.settings(shrink=False, database=example_db))
    except QueueViolation:
        outcome.failure = machine.failures[-1]
    except Exception as exc:  # noqa: BLE001 - a crash of the machine itself is reported, not hidden
        outcome.error = f"{type(exc).__name__}: {exc}"
    try:
        if outcome.failure is not None and shrink:
            outcome.failure = _shrink(backend, outcome.failure, machine._database)
    finally:
        for database in machine.pool:
            database.drop()
    outcome.examples = machine.examples[0]
    outcome.seconds = time.monotonic() - started
    outcome.first_failing_example = machine.failures[0].get("example") if machine.failures else None
    return outcome


def _shrink(backend: QueueBackend, failure: dict[str, Any],
            database: Callable[[], QueueDatabase]) -> dict[str, Any]:
    """The shortest step list found (within :data:`SHRINK_BUDGET_S`) that breaks the same invariant."""
    kind = failure["divergence"]["kind"]
    best = failure
    deadline = time.monotonic() + SHRINK_BUDGET_S

    def attempt(steps: list[dict[str, Any]]) -> dict[str, Any] | None:
        driver = QueueDriver(backend, database())
        try:
            for step in steps:
                driver.apply(step)
        except QueueViolation as exc:
            if exc.kind == kind:
                return {"steps": list(driver.steps), "divergence": exc.to_json(), "message": str(exc)}
        except (IndexError, KeyError):  # a step names a claim that a removed step made
            return None
        finally:
            driver.close()
        return None

    chunk = max(len(best["steps"]) // 2, 1)
    while time.monotonic() < deadline:
        steps = best["steps"]
        shrunk = False
        start = len(steps) - 1 - chunk  # never remove the failing step itself; try later steps first
        while start >= 0 and time.monotonic() < deadline:
            found = attempt(steps[:start] + steps[start + chunk:])
            if found is not None:
                best, steps, shrunk = found, found["steps"], True
            start -= chunk
            start = min(start, len(steps) - 1 - chunk)
        if not shrunk:
            if chunk == 1:
                break
            chunk = max(chunk // 2, 1)
    return best


def replay_queue(bundle: dict[str, Any], backend: QueueBackend,
                 narrate: Callable[[str], None] | None = None) -> ReplayResult:
    """Apply a queue bundle's steps on a fresh database; stop at the first broken invariant."""
    result = ReplayResult()

    def say(line: str) -> None:
        result.narration.append(line)
        if narrate is not None:
            narrate(line)

    database = backend.provision()
    driver = QueueDriver(backend, database, narrate=say)
    try:
        for step in bundle["steps"]:
            driver.apply(step)
    except QueueViolation as exc:
        result.divergence = exc.to_json()
        result.message = str(exc)
        say(f"VIOLATION: {exc}")
    finally:
        driver.close()
        database.drop()
    return result
