"""Promise ``unit_of_work``: nested units that commit once, after-commit callbacks, ``lock_run``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from adapters._sql.families._base import SqlPlumbing, UnitOfWork
from kit.contract.entities import (
    Run,
)
from kit.contract.errors import (
    NotInTransaction,
)

__all__ = ["UnitOfWorkSql"]


class UnitOfWorkSql(SqlPlumbing):
    """Promise ``unit_of_work``: nested units that commit once, after-commit callbacks, ``lock_run``."""

    @contextmanager
    def transaction(self) -> Iterator[UnitOfWork]:
        with self._tx(self.dialect.begin_write):
            assert self._uow is not None
            yield self._uow

    def lock_run(self, run_id: str) -> Run | None:
        if not self._depth:
            raise NotInTransaction("lock_run() needs an open transaction(): call it inside one")
        return self._write(lambda cur: self._locked_run(cur, run_id))
