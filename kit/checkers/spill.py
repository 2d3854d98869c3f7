"""The history index and the final state on disk, read back one group at a time.

Checking a long stress run in memory costs about 0.75 kB per history entry (every
operation, its arguments and its result) plus the whole final state of every run.
Here both are written to a private SQLite file as they are read (one streaming
pass over the history; one run at a time from the database) and the checkers'
views read them back lazily:

* :class:`SpilledIndex` is a :class:`~kit.checkers.index.HistoryIndex` whose views
  (``ops``, ``by_f``, ``by_run``, ``by_command``, ``run_grants``, ``command_grants``,
  ``infos``) are queries: a mapping's groups come in the order the in-memory index
  would have made them, each group read when asked (the last one kept, so a checker
  that reads a group twice sees the same objects), and a flat view streams row by row.
* :class:`SpilledRuns` is a final state's ``tenants`` mapping: runs in the order they
  were read, each unpickled when asked (a few kept).

What stays in memory: the open invocations while indexing, the clock samples as
compact arrays (24 bytes a sample), one group (a run's or a command's operations, or
one key's values of a checker's cross-run question: :meth:`SpilledIndex.groups`),
a few runs' state, and batches of rows on their way to the file. The iteration
orders are exactly the in-memory index's, so every verdict, sentence and witness
is the same.

The file is private to one check (pickles written and read by this process) and
is deleted with the folder it lives in (:func:`kit.checkers.check_stress`).
"""

from __future__ import annotations

import json
import pickle
import sqlite3
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from kit.checkers.groups import DiskGroups, Groups
from kit.checkers.index import Grant, HistoryIndex, Op
from kit.workload.history import read_entries

__all__ = ["SpilledIndex", "SpilledRuns"]

T = TypeVar("T")
_BATCH = 2000

_SCHEMA = """
CREATE TABLE ops (seq INTEGER PRIMARY KEY, idx INTEGER, f TEXT, tenant TEXT, run TEXT, command TEXT, data BLOB);
CREATE TABLE grants (seq INTEGER PRIMARY KEY, command INTEGER, tenant TEXT, key TEXT, data BLOB);
CREATE TABLE infos (seq INTEGER PRIMARY KEY, data BLOB);
"""
_INDEXES = """
CREATE INDEX ops_run ON ops (tenant, run, seq) WHERE run IS NOT NULL;
CREATE INDEX ops_command ON ops (tenant, command, seq) WHERE command IS NOT NULL;
CREATE INDEX ops_f ON ops (f, seq);
CREATE INDEX ops_idx ON ops (idx);
CREATE INDEX grants_key ON grants (command, tenant, key, seq);
"""


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    # a private scratch file: no journal, no fsync; SQLite's page cache is capped at 2 MiB
    db.executescript("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-2048; "
                     "PRAGMA temp_store=FILE;")
    return db


def _key(value: Any) -> str | None:
    """A group key as text that keeps its JSON type (``"1"`` and ``1`` stay two groups, as in a dict)."""
    return None if value is None else json.dumps(value, sort_keys=True)


def _op_row(op: Op) -> tuple[Any, ...]:
    return (op.index, op.process, op.f, op.tenant, op.t, op.store_lo, op.args, op.run, op.command, op.gen,
            op.type, op.done_t, op.done_index, op.value, op.error)


def _op_of(row: tuple[Any, ...]) -> Op:
    op = Op(*row)
    op.tenant = sys.intern(op.tenant)  # one string per tenant, not one per operation decoded
    return op


def _op(data: bytes) -> Op:
    return _op_of(pickle.loads(data))


def _grant(data: bytes) -> Grant:
    row, run, command, gen, revision, expires_us, granted_us = pickle.loads(data)
    return Grant(_op_of(row), run, command, gen, revision, expires_us, granted_us)


class _Rows(Iterable[T]):
    """A flat view: each iteration is one query, streamed row by row."""

    def __init__(self, db: sqlite3.Connection, sql: str, params: tuple[Any, ...], decode: Callable[[bytes], T]):
        self._db, self._sql, self._params, self._decode = db, sql, params, decode

    def __iter__(self) -> Iterator[T]:
        for (data,) in self._db.execute(self._sql, self._params):
            yield self._decode(data)


class _ByF(Mapping[str, Iterable[Op]]):
    """Operations by name, each name's operations streamed in completion order."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __getitem__(self, f: str) -> Iterable[Op]:
        if self._db.execute("SELECT 1 FROM ops WHERE f = ? LIMIT 1", (f,)).fetchone() is None:
            raise KeyError(f)
        return _Rows(self._db, "SELECT data FROM ops WHERE f = ? ORDER BY seq", (f,), _op)

    def __iter__(self) -> Iterator[str]:
        for (f,) in self._db.execute("SELECT f FROM ops GROUP BY f ORDER BY MIN(seq)"):
            yield f

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(DISTINCT f) FROM ops").fetchone()[0])


class _Groups(Mapping[tuple[str, str], Sequence[T]]):
    """Groups keyed by (tenant, key), in the order their first member was kept; one group read at a time."""

    def __init__(self, db: sqlite3.Connection, table: str, column: str, where: str,
                 decode: Callable[[bytes], T]) -> None:
        self._db, self._decode = db, decode
        self._keys_sql = (f"SELECT tenant, {column} FROM {table} WHERE {where} {column} IS NOT NULL "
                          f"GROUP BY tenant, {column} ORDER BY MIN(seq)")
        self._rows_sql = f"SELECT data FROM {table} WHERE {where} tenant = ? AND {column} = ? ORDER BY seq"
        self._count_sql = (f"SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE {where} {column} IS NOT NULL "
                           f"GROUP BY tenant, {column})")
        self._last: tuple[tuple[str, str], list[T]] | None = None

    def __getitem__(self, key: tuple[str, str]) -> list[T]:
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        tenant, value = key
        rows = [self._decode(data) for (data,) in self._db.execute(self._rows_sql, (tenant, _key(value)))]
        if not rows:
            raise KeyError(key)
        self._last = (key, rows)
        return rows

    def __iter__(self) -> Iterator[tuple[str, str]]:
        for tenant, value in self._db.execute(self._keys_sql):
            yield tenant, json.loads(value)

    def __len__(self) -> int:
        return int(self._db.execute(self._count_sql).fetchone()[0])


class SpilledIndex(HistoryIndex):
    """A :class:`HistoryIndex` kept in the SQLite file ``db_path`` (see the module docstring)."""

    def __init__(self, db_path: Path) -> None:
        super().__init__()
        self._db = _connect(db_path)
        self._db.executescript(_SCHEMA)
        self._op_rows: list[tuple[Any, ...]] = []
        self._grant_rows: list[tuple[Any, ...]] = []
        self._info_rows: list[tuple[bytes]] = []
        self._db_by_f = _ByF(self._db)
        self._db_by_run: _Groups[Op] = _Groups(self._db, "ops", "run", "", _op)
        self._db_by_command: _Groups[Op] = _Groups(self._db, "ops", "command", "", _op)
        self._db_run_grants: _Groups[Grant] = _Groups(self._db, "grants", "key", "command = 0 AND", _grant)
        self._db_command_grants: _Groups[Grant] = _Groups(self._db, "grants", "key", "command = 1 AND", _grant)

    @classmethod
    def from_history(cls, history: Path, db_path: Path) -> SpilledIndex:
        """Index the history file ``history`` into ``db_path`` in one streaming pass."""
        index = cls(db_path)
        index._build(read_entries(history))
        return index

    def close(self) -> None:
        self._db.close()

    # -- keeping: rows batched into the file --------------------------------------------
    def _keep(self, op: Op, grants: list[Grant]) -> None:
        self._op_rows.append((op.index, op.f, op.tenant, _key(op.run), _key(op.command),
                              pickle.dumps(_op_row(op), pickle.HIGHEST_PROTOCOL)))
        for g in grants:
            command = g.command is not None
            self._grant_rows.append((int(command), op.tenant, _key(str(g.command) if command else g.run),
                                     pickle.dumps((_op_row(op), g.run, g.command, g.gen, g.revision, g.expires_us,
                                                   g.granted_us), pickle.HIGHEST_PROTOCOL)))
        if len(self._op_rows) >= _BATCH:
            self._flush()

    def _keep_info(self, entry: dict[str, Any]) -> None:
        self._info_rows.append((pickle.dumps(entry, pickle.HIGHEST_PROTOCOL),))
        if len(self._info_rows) >= _BATCH:
            self._flush()

    def _flush(self) -> None:
        self._db.execute("BEGIN")
        self._db.executemany("INSERT INTO ops (idx, f, tenant, run, command, data) VALUES (?, ?, ?, ?, ?, ?)",
                             self._op_rows)
        self._db.executemany("INSERT INTO grants (command, tenant, key, data) VALUES (?, ?, ?, ?)",
                             self._grant_rows)
        self._db.executemany("INSERT INTO infos (data) VALUES (?)", self._info_rows)
        self._db.execute("COMMIT")
        self._op_rows, self._grant_rows, self._info_rows = [], [], []

    def _built(self) -> None:
        self._flush()
        self._db.executescript(_INDEXES)

    # -- the views, read from the file ----------------------------------------------------
    @property
    def ops(self) -> Iterable[Op]:
        return _Rows(self._db, "SELECT data FROM ops ORDER BY idx", (), _op)

    @property
    def by_f(self) -> Mapping[str, Iterable[Op]]:
        return self._db_by_f

    @property
    def by_run(self) -> Mapping[tuple[str, str], Sequence[Op]]:
        return self._db_by_run

    @property
    def by_command(self) -> Mapping[tuple[str, str], Sequence[Op]]:
        return self._db_by_command

    @property
    def run_grants(self) -> Mapping[tuple[str, str], Sequence[Grant]]:
        return self._db_run_grants

    @property
    def command_grants(self) -> Mapping[tuple[str, str], Sequence[Grant]]:
        return self._db_command_grants

    @property
    def infos(self) -> Iterable[dict[str, Any]]:
        return _Rows(self._db, "SELECT data FROM infos ORDER BY seq", (), pickle.loads)

    def groups(self, arity: int) -> Groups[Any]:
        return DiskGroups(self._db, arity)

    def op_at(self, index: int) -> Op:
        row = self._db.execute("SELECT data FROM ops WHERE idx = ?", (index,)).fetchone()
        if row is None:
            raise KeyError(index)
        return _op(row[0])


class _TenantRuns(Mapping[str, dict[str, Any]]):
    """One tenant's runs: ids in the order they were read, each state unpickled when asked."""

    def __init__(self, store: SpilledRuns, tenant: str) -> None:
        self._store, self._tenant = store, tenant

    def __getitem__(self, run_id: str) -> dict[str, Any]:
        return self._store.run(self._tenant, run_id)

    def __contains__(self, run_id: object) -> bool:
        return self._store.has(self._tenant, run_id)

    def __iter__(self) -> Iterator[str]:
        for (run_id,) in self._store.db.execute("SELECT run FROM runs WHERE tenant = ? ORDER BY rowid",
                                                (self._tenant,)):
            yield run_id

    def __len__(self) -> int:
        return int(self._store.db.execute("SELECT COUNT(*) FROM runs WHERE tenant = ?", (self._tenant,)).fetchone()[0])


class SpilledRuns(Mapping[str, Mapping[str, dict[str, Any]]]):
    """A final state's ``tenants`` mapping kept in the SQLite file ``db_path`` (see the module docstring).

    :meth:`tenant` opens a tenant's batch of runs; :meth:`put` adds runs to it; :meth:`done` makes the
    batch the tenant's runs, :meth:`drop` forgets it (a tenant whose reading failed keeps what it had:
    nothing, or an earlier complete batch, as in memory). A run put twice keeps its first place and its
    last state, as a dict does. The batch waits in a staging table (SQLite cannot roll back without a
    journal, and a journal would hold the batch in memory).
    """

    CACHED = 8

    def __init__(self, db_path: Path) -> None:
        self.db = _connect(db_path)
        self.db.executescript("CREATE TABLE tenants (tenant TEXT PRIMARY KEY); "
                              "CREATE TABLE runs (tenant TEXT, run TEXT, data BLOB, PRIMARY KEY (tenant, run)); "
                              "CREATE TABLE batch (run TEXT PRIMARY KEY, data BLOB);")
        self._cache: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()

    def close(self) -> None:
        self.db.close()

    # -- writing ------------------------------------------------------------------
    def tenant(self, tenant: str) -> None:
        self.db.execute("DELETE FROM batch")
        self.db.execute("BEGIN")

    def put(self, tenant: str, run_id: str, state: dict[str, Any]) -> None:
        self.db.execute("INSERT INTO batch (run, data) VALUES (?, ?) "
                        "ON CONFLICT (run) DO UPDATE SET data = excluded.data",
                        (run_id, pickle.dumps(state, pickle.HIGHEST_PROTOCOL)))

    def done(self, tenant: str) -> None:
        self.db.execute("DELETE FROM runs WHERE tenant = ?", (tenant,))
        self.db.execute("INSERT INTO runs (tenant, run, data) SELECT ?, run, data FROM batch ORDER BY rowid",
                        (tenant,))
        self.db.execute("DELETE FROM batch")
        self.db.execute("INSERT OR IGNORE INTO tenants (tenant) VALUES (?)", (tenant,))
        self.db.execute("COMMIT")
        self._cache.clear()

    def drop(self) -> None:
        if self.db.in_transaction:
            self.db.execute("COMMIT")
        self.db.execute("DELETE FROM batch")
        self._cache.clear()

    # -- reading --------------------------------------------------------------------
    def run(self, tenant: str, run_id: str) -> dict[str, Any]:
        """A run's state (unpickled; the last few are kept), else ``KeyError``."""
        key = (tenant, run_id)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        row = self.db.execute("SELECT data FROM runs WHERE tenant = ? AND run = ?", key).fetchone()
        if row is None:
            raise KeyError(key)
        state: dict[str, Any] = pickle.loads(row[0])
        self._cache[key] = state
        if len(self._cache) > self.CACHED:
            self._cache.popitem(last=False)
        return state

    def has(self, tenant: str, run_id: object) -> bool:
        return self.db.execute("SELECT 1 FROM runs WHERE tenant = ? AND run = ?", (tenant, run_id)).fetchone() \
            is not None

    def __getitem__(self, tenant: str) -> Mapping[str, dict[str, Any]]:
        if self.db.execute("SELECT 1 FROM tenants WHERE tenant = ?", (tenant,)).fetchone() is None:
            raise KeyError(tenant)
        return _TenantRuns(self, tenant)

    def __iter__(self) -> Iterator[str]:
        for (tenant,) in self.db.execute("SELECT tenant FROM tenants ORDER BY rowid"):
            yield tenant

    def __len__(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM tenants").fetchone()[0])
