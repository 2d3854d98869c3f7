"""Every contract operation, written once in SQL, for every dialect.

How the guarantees are kept:

* Each operation is one transaction (or joins the open unit of work).
* Writers that touch a run's data lock the run row first (``SELECT ... FOR
  UPDATE``; SQLite's ``BEGIN IMMEDIATE`` serialises writers instead), then the
  command/timer rows: one lock order everywhere, so no deadlock cycles, and
  "select then insert" under the run lock is race-free.
* The store clock is read once per operation, after those locks are held, and
  every comparison and expiry of the operation uses that one instant.
* Fences (owner, generation, live lease, revision) are decided on the locked
  row, and the final UPDATE repeats the revision and generation in its WHERE
  clause and checks it matched exactly one row.
* Claims take candidates oldest-due first with the dialect's SKIP LOCKED.
"""

from __future__ import annotations

from typing import Any

from adapters._sql.families._base import CORE_TABLES
from adapters._sql.families.cancel import CancelSql
from adapters._sql.families.clock import ClockSql
from adapters._sql.families.commands import CommandSql
from adapters._sql.families.decisions import DecisionSql
from adapters._sql.families.definitions import DefinitionSql
from adapters._sql.families.leases import LeaseSql
from adapters._sql.families.runs import RunSql
from adapters._sql.families.schema import SchemaSql
from adapters._sql.families.signals import SignalSql
from adapters._sql.families.timers import TimerSql
from adapters._sql.families.unit_of_work import UnitOfWorkSql
from kit.contract.entities import ClockMode

__all__ = ["CORE_TABLES", "SqlStore", "close_reset_store", "reset_database"]


class SqlStore(
    UnitOfWorkSql,
    SchemaSql,
    ClockSql,
    DefinitionSql,
    RunSql,
    CancelSql,
    DecisionSql,
    LeaseSql,
    CommandSql,
    SignalSql,
    TimerSql,
):
    """One open store: one connection, one tenant, one clock mode; every family's operations.

    Each family's SQL is a mixin in ``adapters/_sql/families/``; dialect stores subclass this
    class and override single operations.
    """


_RESET_STORE = "_kit_reset_store"


def reset_database(database: Any) -> None:
    """Empty a kit-owned database's tables and rewind its test clock, keeping the migrated schema.

    The store that resets is kept open on ``database`` for the next reset (one connection, not
    one per reset); :func:`close_reset_store` closes it before the database is dropped. A kept
    store that fails (its session was ended) is replaced once.
    """
    kept = getattr(database, _RESET_STORE, None)
    if kept is not None:
        try:
            kept.empty_all_tables()
            return
        except Exception:  # noqa: BLE001 - a dead kept session: reset through a new one below
            close_reset_store(database)
    store = database.open(clock=ClockMode.TEST)
    try:
        store.empty_all_tables()
    except BaseException:
        store.close()
        raise
    setattr(database, _RESET_STORE, store)


def close_reset_store(database: Any) -> None:
    """Close the store :func:`reset_database` kept open on ``database``, if any."""
    kept = getattr(database, _RESET_STORE, None)
    if kept is not None:
        setattr(database, _RESET_STORE, None)
        kept.close()
