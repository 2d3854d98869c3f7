"""Cross-run questions in bounded memory: values grouped by key, in memory or in the check's scratch file.

A checker that must relate operations or runs far apart in a history (a timer fired twice,
an idempotency key held by two runs, every send of one signal) groups values by key and
then asks for the groups. :class:`MemoryGroups` is a dict of lists (the in-memory index);
:class:`DiskGroups` keeps the rows in a table of the spilled index's SQLite file
(:class:`kit.checkers.spill.SpilledIndex`) and streams them back, so a long stress run's
check holds one group at a time, not one entry per run ever started.

Both answer in the same orders: groups in the order their key was first added (each
group's values in the order added), and :meth:`Groups.sorted_keys` in Python's tuple order
(keys are tuples of text: SQLite's default collation compares UTF-8 bytes, which orders
text by code point, as Python does).
"""

from __future__ import annotations

import itertools
import pickle
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterator
from typing import Any, Generic, TypeVar

__all__ = ["DiskGroups", "Groups", "MemoryGroups"]

K = TypeVar("K", bound=tuple[Hashable, ...])
_BATCH = 256
"""Rows written per transaction: a full batch is the largest thing a group keeps in memory (at 2000 rows,
about 300 KB, a third of a long run's checking peak)."""


class Groups(ABC, Generic[K]):
    """Values grouped by a key of fixed arity (see the module docstring)."""

    @abstractmethod
    def add(self, key: K, value: Any) -> None:
        """Append ``value`` to ``key``'s group (a new key starts a group)."""

    @abstractmethod
    def __iter__(self) -> Iterator[tuple[K, list[Any]]]:
        """Every key with its values: keys in first-added order, values in added order."""

    def repeated(self) -> Iterator[tuple[K, list[Any]]]:
        """The keys added more than once, as :meth:`__iter__` gives them."""
        return ((key, values) for key, values in self if len(values) > 1)

    @abstractmethod
    def sorted_keys(self) -> Iterator[K]:
        """Every key once, in ascending (tuple) order."""

    @abstractmethod
    def __contains__(self, key: object) -> bool:
        """Whether ``key`` was added."""

    @abstractmethod
    def __len__(self) -> int:
        """How many distinct keys."""


class MemoryGroups(Groups[K]):
    """A dict of lists: for histories checked in memory."""

    def __init__(self) -> None:
        self._groups: dict[K, list[Any]] = {}

    def add(self, key: K, value: Any) -> None:
        self._groups.setdefault(key, []).append(value)

    def __iter__(self) -> Iterator[tuple[K, list[Any]]]:
        return iter(self._groups.items())

    def sorted_keys(self) -> Iterator[K]:
        return iter(sorted(self._groups))

    def __contains__(self, key: object) -> bool:
        return key in self._groups

    def __len__(self) -> int:
        return len(self._groups)


class DiskGroups(Groups[K]):
    """Rows of a table of ``db`` (one table per instance, left to the scratch file's deletion); rows are
    written in batches, and the table is indexed by key on the first question asked of it. Nothing is
    added after the first question (the checkers build, then ask)."""

    _tables = itertools.count()

    def __init__(self, db: sqlite3.Connection, arity: int) -> None:
        if arity < 1:
            raise ValueError(f"a group key has at least one part, not {arity}")
        self._db, self._arity = db, arity
        self._table = f"groups_{next(self._tables)}"
        self._keys = ", ".join(f"k{i}" for i in range(arity))
        self._match = " AND ".join(f"k{i} = ?" for i in range(arity))
        # no declared type: a value keeps its type (1 and '1' stay two keys, as in a dict)
        db.execute(f"CREATE TABLE {self._table} (seq INTEGER PRIMARY KEY, {self._keys}, v BLOB)")
        self._rows: list[tuple[Any, ...]] = []
        self._indexed = False

    def add(self, key: K, value: Any) -> None:
        if self._indexed:
            raise RuntimeError("a group was added to after it was read: build every group first, then read")
        if len(key) != self._arity:
            raise ValueError(f"a key of {len(key)} parts added to groups of {self._arity}")
        self._rows.append((*key, pickle.dumps(value, pickle.HIGHEST_PROTOCOL)))
        if len(self._rows) >= _BATCH:
            self._flush()

    def _flush(self) -> None:
        if self._rows:
            marks = ", ".join("?" * (self._arity + 1))
            self._db.execute("BEGIN")
            self._db.executemany(f"INSERT INTO {self._table} ({self._keys}, v) VALUES ({marks})", self._rows)
            self._db.execute("COMMIT")
            self._rows = []

    def _ready(self) -> None:
        if not self._indexed:
            self._flush()
            self._db.execute(f"CREATE INDEX {self._table}_key ON {self._table} ({self._keys}, seq)")
            self._indexed = True

    def __iter__(self) -> Iterator[tuple[K, list[Any]]]:
        self._ready()
        t, keys = self._table, self._keys
        rows = self._db.execute(
            f"SELECT {', '.join(f'g.k{i}' for i in range(self._arity))}, g.v FROM {t} AS g "
            f"JOIN (SELECT {keys}, MIN(seq) AS first FROM {t} GROUP BY {keys}) AS f "
            f"ON {' AND '.join(f'f.k{i} IS g.k{i}' for i in range(self._arity))} ORDER BY f.first, g.seq")
        current: K | None = None
        values: list[Any] = []
        for row in rows:
            key: Any = tuple(row[:-1])
            if key != current:
                if current is not None:
                    yield current, values
                current, values = key, []
            values.append(pickle.loads(row[-1]))
        if current is not None:
            yield current, values

    def sorted_keys(self) -> Iterator[K]:
        self._ready()
        for row in self._db.execute(f"SELECT {self._keys} FROM {self._table} GROUP BY {self._keys} "
                                    f"ORDER BY {self._keys}"):
            yield tuple(row)  # type: ignore[misc]

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple) or len(key) != self._arity:
            return False
        self._ready()
        return self._db.execute(f"SELECT 1 FROM {self._table} WHERE {self._match} LIMIT 1", key).fetchone() is not None

    def __len__(self) -> int:
        self._ready()
        return int(self._db.execute(
            f"SELECT COUNT(*) FROM (SELECT 1 FROM {self._table} GROUP BY {self._keys})").fetchone()[0])
