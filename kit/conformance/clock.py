"""The store clock: exact and shared in test mode; the server's own, moving, in database mode."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from kit.clock import system_now, to_micros
from kit.conformance._harness import AreaChecks, requires
from kit.contract import Backend, Capability, ClockMode, ClockModeError, Promise, Storage

__all__ = ["ClockChecks"]


class ClockChecks(AreaChecks):
    area = "clock"

    @pytest.fixture
    def db_clock_store(self, open_store: Callable[..., Storage], kit_backend: Backend) -> Storage:
        if Capability.DATABASE_CLOCK not in kit_backend.capabilities:
            pytest.skip(f"unsupported: backend {kit_backend.name!r} does not declare database_clock")
        return open_store(clock=ClockMode.DATABASE)

    @requires(Capability.TEST_CLOCK)
    def test_test_clock_set_is_exact(self, store: Storage) -> None:
        """The test clock reads back exactly the microsecond it was set to."""
        at = datetime(2031, 5, 6, 7, 8, 9, 123457, tzinfo=UTC)
        store.set_test_clock(at)
        assert store.now() == at

    @requires(Capability.TEST_CLOCK)
    def test_test_clock_advance_is_exact(self, store: Storage) -> None:
        """Advancing the test clock by one microsecond moves it by exactly one microsecond."""
        before = store.now()
        after = store.advance_test_clock(timedelta(microseconds=1))
        assert after - before == timedelta(microseconds=1)
        assert store.now() == after

    @requires(Capability.TEST_CLOCK)
    def test_test_clock_is_shared_by_stores(self, store: Storage, open_store: Callable[..., Storage]) -> None:
        """Every store on one database reads the same test clock."""
        other = open_store("tenant-b")
        store.advance_test_clock(timedelta(hours=3, microseconds=7))
        assert other.now() == store.now()

    def test_store_clock_is_aware_utc(self, store: Storage) -> None:
        """The store clock is a timezone-aware UTC datetime."""
        now = store.now()
        assert now.tzinfo is not None and now.utcoffset() == timedelta(0)

    @requires(Capability.TEST_CLOCK)
    def test_test_clock_refused_on_database_clock(self, db_clock_store: Storage) -> None:
        """Driving the test clock on a store opened with the database clock raises ClockModeError."""
        with pytest.raises(ClockModeError):
            db_clock_store.advance_test_clock(timedelta(seconds=1))

    def test_database_clock_reads_server_time(self, db_clock_store: Storage) -> None:
        """The database clock is the server's current time (within an hour of this host's)."""
        assert abs(db_clock_store.now() - system_now()) < timedelta(hours=1)

    def test_database_clock_is_monotonic_across_calls(self, db_clock_store: Storage) -> None:
        """Successive reads of the database clock never go backwards."""
        readings = [db_clock_store.now() for _ in range(20)]
        assert readings == sorted(readings)

    @requires(Promise.UNIT_OF_WORK)
    def test_database_clock_moves_inside_a_transaction(self, db_clock_store: Storage) -> None:
        """The store clock keeps moving inside a long transaction (never a transaction-start time)."""
        with db_clock_store.transaction():
            first = db_clock_store.now()
            time.sleep(0.05)
            second = db_clock_store.now()
        assert second > first, "the clock is frozen at transaction start (e.g. PostgreSQL now())"

    def test_database_clock_has_declared_resolution(self, db_clock_store: Storage, kit_backend: Backend) -> None:
        """The database clock ticks at the resolution the adapter declares (nothing rounded away)."""
        declared = kit_backend.capabilities.clock_resolution_us
        coarse = declared * 10
        readings = []
        for _ in range(25):
            readings.append(to_micros(db_clock_store.now()))
            time.sleep(0.0013 * max(1, declared // 1000))
        assert any(r % coarse for r in readings), (
            f"all 25 readings are multiples of {coarse} us: the clock is coarser than the declared "
            f"{declared} us (fractional seconds dropped?)"
        )
