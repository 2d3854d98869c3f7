"""Every seeded bug the kit knows, per backend."""

from __future__ import annotations

from tests.seeded_bugs._base import SeededBug

__all__ = ["all_bugs"]


def all_bugs() -> list[SeededBug]:
    from tests.seeded_bugs.mysql_bugs import MYSQL_BUGS
    from tests.seeded_bugs.postgres_bugs import POSTGRES_BUGS
    from tests.seeded_bugs.sqlite_bugs import SQLITE_BUGS

    return [*SQLITE_BUGS, *POSTGRES_BUGS, *MYSQL_BUGS]


def __getattr__(name: str) -> object:
    """``tests.seeded_bugs.registry:<bug name>`` is a backend factory, so `kit replay` can name a bug."""
    for bug in all_bugs():
        if bug.name == name:
            return bug.make_backend
    raise AttributeError(name)
