"""Seeded bugs that only real concurrency reveals: what ``kit stress`` must catch.

Kept apart from :func:`tests.seeded_bugs.registry.all_bugs` (which feeds the
conformance and fault-machine kill table): these are judged by the stress
checkers, and :data:`STRESS_BUGS` says which invariant must catch each.

* ``claim_without_lock`` -- the claim's candidate SELECT takes no row locks
  (no ``FOR UPDATE SKIP LOCKED``): two claimers read the same due run and both
  claim it; both believe they hold it.
* ``fence_check_then_act`` -- every fenced write (commit, completion, failure,
  heartbeat, renewal) checks owner, generation, live lease and revision in one
  transaction, then writes in a second one without checking again: a worker
  paused between the two writes after its lease was lost and taken over.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar, cast

from kit.contract import JSON, Backend, CommandClaim, Decision, Outcome, RunClaim

__all__ = ["STRESS_BUGS", "CheckThenAct", "StressBug"]

T = TypeVar("T")

_FENCED_UPDATE = "AND revision = ? AND claim_generation = ?"
_BLIND_UPDATE = "AND ? IS NOT NULL AND ? IS NOT NULL"


@dataclass(frozen=True)
class StressBug:
    """A broken adapter and the stress invariants of which at least one must be violated."""

    name: str
    backend: str
    description: str
    make_backend: Callable[[], Backend]
    caught_by: tuple[int, ...]


class CheckThenAct:
    """Mixin for an SQL store: fenced writes check in one transaction and act in another.

    The second transaction re-reads nothing it would refuse on: no fence, no
    revision, no consumability, and the final run UPDATE matches by id alone.
    """

    _trusting = False

    def _checked(self, check: Callable[[Any], Outcome | None], act: Callable[[], T]) -> T | Outcome:
        store = cast(Any, self)
        refused = store._write(check)
        if refused is not None:
            return cast(Outcome, refused)
        self._trusting = True  # the bug: what was true a transaction ago is taken as still true
        try:
            return act()
        finally:
            self._trusting = False

    # -- what the second transaction no longer checks ------------------------------------
    def _refuse_run(self, run: Any, claim: RunClaim, now: int) -> Outcome | None:
        return None if self._trusting else cast(Any, super())._refuse_run(run, claim, now)

    def revision_current(self, run: Any, expected_revision: int) -> bool:
        return True if self._trusting else bool(cast(Any, super()).revision_current(run, expected_revision))

    def _check_consumable(self, cur: Any, run_id: str, decision: Decision) -> None:
        if not self._trusting:
            cast(Any, super())._check_consumable(cur, run_id, decision)

    def _fenced_command(self, cur: Any, claim: CommandClaim) -> tuple[Any, Any, int, Outcome | None]:
        if not self._trusting:
            return cast(tuple[Any, Any, int, Outcome | None], cast(Any, super())._fenced_command(cur, claim))
        store = cast(Any, self)
        run = store._locked_run(cur, claim.run_id)
        command = store._locked_command(cur, claim.command_id)
        return run, command, store._now_us(cur), None

    def _exec(self, cur: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        if self._trusting:
            sql = sql.replace(_FENCED_UPDATE, _BLIND_UPDATE)
        return cast(Any, super())._exec(cur, sql, params)

    # -- the fenced writes, split in two ---------------------------------------------------
    def _run_check(self, claim: RunClaim, expected_revision: int | None = None,
                   decision: Decision | None = None) -> Callable[[Any], Outcome | None]:
        store = cast(Any, self)

        def check(cur: Any) -> Outcome | None:
            run = store._locked_run(cur, claim.run_id)
            refused = store._refuse_run(run, claim, store._now_us(cur))
            if refused is not None:
                return cast(Outcome, refused)
            if expected_revision is not None and run.revision != expected_revision:
                return Outcome.REVISION_MISMATCH
            if decision is not None:
                store._check_consumable(cur, run.run_id, decision)
            return None

        return check

    def _command_check(self, claim: CommandClaim) -> Callable[[Any], Outcome | None]:
        store = cast(Any, self)
        return lambda cur: cast(Outcome | None, store._fenced_command(cur, claim)[3])

    def commit_decision(self, claim: RunClaim, expected_revision: int, decision: Decision) -> Outcome:
        act = lambda: cast(Any, super(CheckThenAct, self)).commit_decision(claim, expected_revision, decision)
        return cast(Outcome, self._checked(self._run_check(claim, expected_revision, decision), act))

    def renew_run_claim(self, claim: RunClaim, lease: timedelta) -> Outcome:
        act = lambda: cast(Any, super(CheckThenAct, self)).renew_run_claim(claim, lease)
        return cast(Outcome, self._checked(self._run_check(claim), act))

    def complete_command(self, claim: CommandClaim, result: JSON = None) -> Outcome:
        act = lambda: cast(Any, super(CheckThenAct, self)).complete_command(claim, result)
        return cast(Outcome, self._checked(self._command_check(claim), act))

    def fail_command(self, claim: CommandClaim, error: JSON = None, retry_after: timedelta | None = None,
                     retryable: bool = True) -> Outcome:
        act = lambda: cast(Any, super(CheckThenAct, self)).fail_command(claim, error, retry_after, retryable)
        return cast(Outcome, self._checked(self._command_check(claim), act))

    def heartbeat_command(self, claim: CommandClaim, lease: timedelta) -> Outcome:
        act = lambda: cast(Any, super(CheckThenAct, self)).heartbeat_command(claim, lease)
        return cast(Outcome, self._checked(self._command_check(claim), act))


# -- backends -----------------------------------------------------------------------------
def _postgres(check_then_act: bool = False, no_lock: bool = False) -> Callable[[], Backend]:
    def make() -> Backend:
        from adapters.postgres import PostgresBackend, PostgresDialect, PostgresStore, discover

        class NoLockDialect(PostgresDialect):
            skip_locked = ""  # the candidates are read without FOR UPDATE SKIP LOCKED

        class Store(CheckThenAct, PostgresStore):
            pass

        class Variant(PostgresBackend):
            store_class = Store if check_then_act else PostgresStore
            dialect = NoLockDialect() if no_lock else PostgresDialect()

        return cast(Backend, discover(backend_class=Variant))

    return make


def _mysql(check_then_act: bool = False, no_lock: bool = False) -> Callable[[], Backend]:
    def make() -> Backend:
        from adapters.mysql import MysqlBackend, MysqlDialect, MysqlStore, discover

        class NoLockDialect(MysqlDialect):
            skip_locked = ""

        class Store(CheckThenAct, MysqlStore):
            pass

        class Variant(MysqlBackend):
            store_class = Store if check_then_act else MysqlStore
            dialect = NoLockDialect() if no_lock else MysqlDialect()

        return cast(Backend, discover(backend_class=Variant))

    return make


def _sqlite_check_then_act() -> Backend:
    from adapters.sqlite import SqliteBackend, SqliteDatabase, SqliteStore

    class Store(CheckThenAct, SqliteStore):
        pass

    class Database(SqliteDatabase):
        store_class = Store

    class Variant(SqliteBackend):
        database_class = Database

    return cast(Backend, Variant())


STRESS_BUGS: tuple[StressBug, ...] = (
    StressBug("claim_without_lock", "postgres", "the claim's candidate SELECT takes no row locks: two claimers "
              "take one run", _postgres(no_lock=True), (4,)),
    StressBug("claim_without_lock", "mysql", "the claim's candidate SELECT takes no row locks: two claimers "
              "take one run", _mysql(no_lock=True), (4,)),
    StressBug("fence_check_then_act", "postgres", "fenced writes check the fence in one transaction and write in "
              "another", _postgres(check_then_act=True), (2, 3, 4)),
    StressBug("fence_check_then_act", "mysql", "fenced writes check the fence in one transaction and write in "
              "another", _mysql(check_then_act=True), (2, 3, 4)),
    StressBug("fence_check_then_act", "sqlite", "fenced writes check the fence in one transaction and write in "
              "another", _sqlite_check_then_act, (2, 3, 4)),
)


def __getattr__(name: str) -> object:
    """``tests.seeded_bugs.stress_bugs:<backend>_<bug>`` is a backend factory (``kit stress --backend``)."""
    for bug in STRESS_BUGS:
        if name == f"{bug.backend}_{bug.name}":
            return bug.make_backend
    raise AttributeError(name)
