"""The runtime's bells: one ring is one unit of work and wakes one waiter; rings while every poller
is busy are kept; stopping wakes everyone. The timer loop's due times are the scheduled delays."""

from __future__ import annotations

import threading
import time

from kit.runtime.service import Bell, _Dues


def test_a_ring_wakes_exactly_one_of_the_waiters() -> None:
    bell = Bell()
    woke: list[int] = []
    first = threading.Event()

    def wait(i: int) -> None:
        if bell.wait(60):
            woke.append(i)
            first.set()

    threads = [threading.Thread(target=wait, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    bell.ring()
    assert first.wait(30), "a ring woke no waiter"
    assert len(woke) == 1, f"one ring woke {len(woke)} waiters"
    bell.close()  # stopping wakes the others
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)


def test_rings_while_nobody_waits_are_kept_one_poll_each() -> None:
    bell = Bell()
    bell.ring(2)
    assert bell.wait(0) and bell.wait(0), "a ring announced while every poller was busy was lost"
    assert not bell.wait(0), "a poller woke without a ring: an idle poll"
    bell.ring(0)
    assert not bell.wait(0)


def test_the_timer_loop_sleeps_until_the_earliest_scheduled_timer_or_its_cap() -> None:
    dues = _Dues()
    assert dues.until_next(0.5) == 0.5  # nothing scheduled: the cap
    dues.add(3600.0)
    assert dues.until_next(0.5) == 0.5  # due later than the cap
    dues.add(0.0)
    assert dues.until_next(0.5) < 0.5  # a timer due now: poll at once (after the slack)
    dues.take_due(now=time.monotonic() + 1.0)  # the poll that served it
    assert dues.until_next(10.0) == 10.0  # only the far timer is left: sleep the whole cap
