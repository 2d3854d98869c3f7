"""What every conformance check stands on: fixtures, capability gating, small helpers.

A check is a ``test_*`` method of an area class. Its docstring is the
guarantee it proves (reports quote it when the check fails); its id is
``<area>.<name without test_>``; :func:`requires` names the capabilities it
needs. The adapter comes from the ``kit_backend`` fixture: the kit's pytest
plugin provides it from ``--kit-backend``, or an author overrides it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from typing import Any, ClassVar, TypeVar

import pytest

from kit.conformance._shared import SharedDatabase, fresh_database, needs_fresh_database
from kit.contract import (
    Backend,
    Capabilities,
    Capability,
    ClockMode,
    Database,
    Decision,
    DefinitionRef,
    NewCommand,
    NewEvent,
    NewTimer,
    Promise,
    Run,
    RunClaim,
    RunStatus,
    Storage,
    digest_of,
)
from kit.contract.outcomes import Outcome
from kit.faults import StatementFaults
from kit.inspect import observable_state

__all__ = [
    "LEASE",
    "TENANT",
    "AreaChecks",
    "Need",
    "Threads",
    "check_id",
    "fresh_database",
    "requires",
    "store_clock",
]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
U = TypeVar("U")

LEASE = timedelta(seconds=30)
TENANT = "tenant-a"
THREAD_TIMEOUT_S = 60.0
"""How long a thread of a concurrency check may take before the check calls it stuck."""


Need = Capability | Promise
"""What a check may require: a capability of the store's environment or a promise of the store."""


def requires(*capabilities: Need) -> Callable[[F], F]:
    """Declare the capabilities and promises a check needs.

    A promise the store does not make skips the check as ``not-promised``; an
    undeclared capability skips it as ``unsupported``. A check that moves or
    sets the test clock must name :attr:`Capability.TEST_CLOCK`; every other
    check runs on the database clock when the store has no test clock.
    """

    def mark(fn: F) -> F:
        if isinstance(fn, type):  # a whole area: mark each check it defines
            for name, member in vars(fn).items():
                if name.startswith("test_") and callable(member):
                    mark(member)
            return fn
        existing: tuple[Need, ...] = getattr(fn, "kit_requires", ())
        fn.kit_requires = existing + capabilities  # type: ignore[attr-defined]
        return fn

    return mark


def store_clock(backend: Backend) -> ClockMode:
    """The clock the checks' stores run on: the test clock if declared, else the database clock."""
    if Capability.TEST_CLOCK in backend.capabilities:
        return ClockMode.TEST
    if Capability.DATABASE_CLOCK in backend.capabilities:
        return ClockMode.DATABASE
    pytest.skip(f"unsupported: backend {backend.name!r} declares neither test_clock nor database_clock")


def check_id(cls: type, function_name: str) -> str:
    """``<area>.<name>``, the area being that of the class that defines the check."""
    area = getattr(cls, "area", cls.__name__)
    for klass in cls.__mro__:
        if function_name in vars(klass):
            area = getattr(klass, "area", klass.__name__)
            break
    return f"{area}.{function_name.removeprefix('test_')}"


class Threads:
    """Run callables in threads started together; re-raise the first error; never hang."""

    @staticmethod
    def run(functions: Sequence[Callable[[], Any]], timeout: float = THREAD_TIMEOUT_S) -> list[Any]:
        barrier = threading.Barrier(len(functions))
        results: list[Any] = [None] * len(functions)
        errors: list[BaseException | None] = [None] * len(functions)

        def worker(i: int, fn: Callable[[], Any]) -> None:
            try:
                barrier.wait(timeout)
                results[i] = fn()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors[i] = exc

        threads = [threading.Thread(target=worker, args=(i, f), daemon=True) for i, f in enumerate(functions)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout)
        stuck = [i for i, t in enumerate(threads) if t.is_alive()]
        if stuck:
            pytest.fail(f"threads {stuck} did not finish within {timeout:.0f} s: a store blocked or deadlocked")
        for err in errors:
            if err is not None:
                raise err
        return results


    @staticmethod
    def beside_open_transaction(
        holder: Storage, hold: Callable[[], T], other: Callable[[], U], who: str, wait_s: float = 10.0
    ) -> tuple[T, U]:
        """Run ``hold`` in an open transaction of ``holder`` and, while it stays open, ``other`` on another
        thread; return both results. The check fails if ``other`` waits for the transaction (it must skip
        what the holder locked, not block on it) or raises (``who`` names it in the message)."""
        result: list[U] = []
        errors: list[BaseException] = []
        done = threading.Event()

        def run_other() -> None:
            try:
                result.append(other())
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
            finally:
                done.set()

        with holder.transaction():
            held = hold()
            thread = threading.Thread(target=run_other, daemon=True)
            thread.start()
            returned = done.wait(wait_s)
        thread.join(THREAD_TIMEOUT_S)
        assert returned, f"{who} waited for the holder's open transaction instead of skipping locked rows"
        assert not errors, f"{who} failed instead of skipping the locked row: {errors[0]!r}"
        return held, result[0]


class AreaChecks:
    """Base of every area class: fixtures and helpers. Subclass the suite, not this."""

    area: ClassVar[str] = "conformance"
    kit_caps: Capabilities = Capabilities()
    """The backend's declaration, set for each check before it runs (helpers build state with it)."""

    # -- fixtures ---------------------------------------------------------
    @pytest.fixture(autouse=True)
    def _kit_gate(self, request: pytest.FixtureRequest, kit_backend: Backend) -> None:
        """Skip checks whose promises are not made (not-promised) or whose capabilities are
        undeclared (unsupported); mark declared expected failures strict."""
        fn = request.function
        needed: tuple[Need, ...] = getattr(fn, "kit_requires", ())
        caps = kit_backend.capabilities
        self.kit_caps = caps
        unpromised = caps.not_promised(needed)
        if unpromised:
            names = ", ".join(p.value for p in unpromised)
            pytest.skip(f"not-promised: backend {kit_backend.name!r} does not promise {names}")
        missing = caps.missing(needed)
        if missing:
            names = ", ".join(c.value for c in missing)
            pytest.skip(f"unsupported: backend {kit_backend.name!r} does not declare {names}")
        cid = check_id(type(self), fn.__name__)
        reason = kit_backend.capabilities.expected_failures.get(cid)
        if reason is not None:
            request.applymarker(pytest.mark.xfail(strict=True, reason=f"expected-failure: {reason}"))

    @pytest.fixture(scope="class")
    @classmethod
    def kit_shared_database(cls, kit_backend: Backend) -> Iterator[SharedDatabase]:
        """The migrated database this class's checks share (one per process or xdist worker)."""
        shared = SharedDatabase(kit_backend)
        try:
            yield shared
        finally:
            shared.close()

    @pytest.fixture
    def database(
        self, request: pytest.FixtureRequest, kit_backend: Backend, kit_shared_database: SharedDatabase
    ) -> Iterator[Database]:
        """The check's database: the shared one, reset (no row of an earlier check survives) and
        migrated; or, for a check marked :func:`fresh_database` or a backend that cannot reset, a newly
        provisioned one dropped after the check."""
        if not needs_fresh_database(request.function):
            shared = kit_shared_database.checkout()
            if shared is not None:
                yield shared
                return
        db = kit_backend.provision()
        try:
            yield db
        finally:
            db.drop()

    @pytest.fixture
    def open_store(
        self, database: Database, kit_backend: Backend, kit_shared_database: SharedDatabase
    ) -> Iterator[Callable[..., Storage]]:
        """Open more migrated stores on the test's database (closed at teardown).

        They run on the test clock when the store has one, else on the database clock
        (a check that moves the clock requires ``test_clock`` and was skipped already).
        On the shared database, migrated once with the adapter's own migrations, a store
        with those migrations is not migrated again.
        """
        opened: list[Storage] = []
        clock = store_clock(kit_backend)
        migrated = kit_shared_database.holds(database)

        def open_(tenant: str = TENANT, migrate: bool = True, **kwargs: Any) -> Storage:
            kwargs.setdefault("clock", clock)
            store = database.open(tenant, **kwargs)
            opened.append(store)
            if migrate and not (migrated and kwargs.get("migrations") is None):
                store.migrate()
            return store

        yield open_
        for store in opened:
            store.close()

    @pytest.fixture
    def store(self, open_store: Callable[..., Storage]) -> Storage:
        """A migrated store for tenant ``tenant-a`` on the test clock."""
        return open_store()

    @pytest.fixture
    def faults(self) -> StatementFaults:
        return StatementFaults()

    # -- helpers ----------------------------------------------------------
    def promised(self, need: Need) -> bool:
        """Whether the store under check makes this promise (or declares this capability)."""
        return need in self.kit_caps

    def let_time_pass(self, store: Storage, by: timedelta = timedelta(seconds=1)) -> None:
        """Move the test clock on by ``by``; on the database clock time passes by itself."""
        if self.promised(Capability.TEST_CLOCK) and store.clock_mode is ClockMode.TEST:
            store.advance_test_clock(by)

    def need_any(self, *promises: Promise) -> None:
        """Skip as not-promised unless the store makes at least one of ``promises`` (for a check whose
        parts each stand on one of them)."""
        if not any(self.promised(p) for p in promises):
            names = " or ".join(p.value for p in promises)
            pytest.skip(f"not-promised: the store promises none of {names}")

    def observed(self, store: Storage) -> dict[str, Any]:
        """The store's observable state, reading only the families it promises."""
        return observable_state(store, self.kit_caps.promises)

    def define(self, store: Storage, name: str = "wf", body: bytes = b"workflow v1", version: str = "1") -> DefinitionRef:
        """A definition to start runs from: stored when the store promises definitions, else only named."""
        if not self.promised(Promise.DEFINITIONS):
            return DefinitionRef(name, version, digest_of(body))
        return store.ensure_definition(name, version, digest_of(body), body).ref

    def start(self, store: Storage, run_id: str = "run-1", **kwargs: Any) -> Run:
        ref = kwargs.pop("definition", None) or self.define(store)
        return store.start_run(run_id, ref, **kwargs).run

    @staticmethod
    def claim_one(store: Storage, worker: str = "w1", lease: timedelta = LEASE) -> RunClaim:
        claims = store.claim_runs(worker, lease, limit=1)
        assert len(claims) == 1, f"expected one claimable run, got {claims}"
        return claims[0]

    def started_and_claimed(self, store: Storage, run_id: str = "run-1", worker: str = "w1") -> RunClaim:
        self.start(store, run_id)
        claim = self.claim_one(store, worker)
        assert claim.run_id == run_id
        return claim

    def blocked_on_command(self, store: Storage, run_id: str = "run-1", key: str = "op-1", **command: Any) -> RunClaim:
        """A run that committed one decision scheduling command ``key`` and blocked (pending, without
        ``wake_on_input``: a store that cannot block keeps the run claimable instead)."""
        claim = self.started_and_claimed(store, run_id)
        outcome = store.commit_decision(
            claim,
            claim.revision,
            Decision(
                self.waiting_status(),
                events=(NewEvent("command-scheduled", {"key": key}),),
                commands=(NewCommand(key, command.pop("name", "do-work"), command.pop("input", {"n": 1}), **command),),
            ),
        )
        assert outcome is Outcome.COMMITTED
        return claim

    def blocked_on_timer(self, store: Storage, run_id: str = "run-1", delay: timedelta = timedelta(seconds=10)) -> RunClaim:
        """A run that scheduled one timer and blocked (pending without ``wake_on_input``)."""
        claim = self.started_and_claimed(store, run_id)
        outcome = store.commit_decision(
            claim, claim.revision, Decision(self.waiting_status(), timers=(NewTimer("sleep", delay=delay),))
        )
        assert outcome is Outcome.COMMITTED
        return claim

    def blocked(self, store: Storage, run_id: str = "run-1") -> RunClaim:
        """A run that committed one decision and blocked (needs ``wake_on_input``)."""
        claim = self.started_and_claimed(store, run_id)
        assert store.commit_decision(claim, claim.revision, Decision(RunStatus.BLOCKED)) is Outcome.COMMITTED
        return claim

    def waiting(self, store: Storage, run_id: str = "run-1") -> Run:
        """A live run that can take input (signals, commands, cancel requests): blocked when the store
        promises ``wake_on_input``, else just started. For checks about the input, not about waking."""
        if self.promised(Promise.WAKE_ON_INPUT):
            self.blocked(store, run_id)
            run = store.get_run(run_id)
            assert run is not None
            return run
        return self.start(store, run_id)

    def waiting_status(self) -> RunStatus:
        """``blocked`` when the store promises ``wake_on_input``, else ``pending`` (still claimable)."""
        return RunStatus.BLOCKED if self.promised(Promise.WAKE_ON_INPUT) else RunStatus.PENDING

    def completed(self, store: Storage, run_id: str = "run-1", output: Any = None) -> RunClaim:
        claim = self.started_and_claimed(store, run_id)
        decision = Decision(RunStatus.COMPLETED, output=output if output is not None else {"ok": True})
        assert store.commit_decision(claim, claim.revision, decision) is Outcome.COMMITTED
        return claim
