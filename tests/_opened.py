"""A migrated store on a fresh kit-owned database, for the tests that count what a store sends."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kit.contract import Backend, ClockMode, StatementHook, Storage
from kit.runtime.ceiling import RecordingBackend

__all__ = ["opened"]


@contextmanager
def opened(
    backend: Backend, hook: StatementHook | None = None
) -> Iterator[tuple[Any, Storage, RecordingBackend | None]]:
    """A fresh database of ``backend`` (dropped afterwards), a migrated store on it (test clock, ``hook`` on its
    statements), and the recorder counting round trips (None for a backend without server connections)."""
    recording = RecordingBackend(backend) if hasattr(backend, "_connect") else None
    database: Any = backend.provision()
    try:
        store = database.open("t", clock=ClockMode.TEST, statement_hook=hook)
        try:
            store.migrate()
            yield database, store, recording
        finally:
            store.close()
    finally:
        if recording is not None:
            recording.stop()
        database.drop()
