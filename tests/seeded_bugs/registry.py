"""Every seeded bug the kit knows, per backend."""

from __future__ import annotations

from tests.seeded_bugs._base import SeededBug

__all__ = ["all_bugs"]


def all_bugs() -> list[SeededBug]:
    from tests.seeded_bugs.sqlite_bugs import SQLITE_BUGS

    return [*SQLITE_BUGS]
