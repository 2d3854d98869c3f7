"""A closed store that nobody references any more is freed at once, by reference counting.

A store caught in a reference cycle (with its connection, its statement hook, its kill switch)
waits for the cyclic collector, which runs rarely once the heap is large: a stress run opens and
drops stores on every crash and reconnect, and the memory it held would follow the run's length.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from kit.contract import Backend, ClockMode
from kit.pytest_plugin import use_backend


@pytest.fixture(params=["memory", "sqlite", "postgres", "mysql"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    yield from use_backend(request.param)


def test_a_closed_store_is_freed_when_dropped(backend: Backend) -> None:
    database = backend.provision()
    try:
        setup = database.open("t", clock=ClockMode.DATABASE)
        setup.migrate()
        setup.close()
        gc.collect()
        enabled = gc.isenabled()
        gc.disable()
        try:
            store = database.open("t", clock=ClockMode.DATABASE, statement_hook=lambda statement: None)
            store.now()
            store.close()
            alive = weakref.ref(store)
            del store
            assert alive() is None, "the closed store is still referenced: a reference cycle keeps it alive"
        finally:
            if enabled:
                gc.enable()
    finally:
        database.drop()
