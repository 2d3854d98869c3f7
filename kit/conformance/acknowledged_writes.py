"""Nothing acknowledged is lost: a write beside another store's open unit of work survives its commit.

A caller may hold one store's ``transaction()`` open and, on the same thread,
write through a second store (an outbox relay, a request handler that opened
its own store). The second write either is refused with a typed error
(:class:`~kit.contract.TransientError`, such as a lock timeout: nothing was
written) or it is acknowledged, and then it is there after the open unit
commits, next to everything that unit wrote (CONTRACT.md section 6,
invariant 7).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kit.conformance._harness import AreaChecks, requires
from kit.contract import Promise, Storage, TransientError

__all__ = ["AcknowledgedWriteChecks"]


def _acknowledged(write: Callable[[], Any]) -> bool:
    """Whether ``write`` was acknowledged (True) or refused with a transient error (False)."""
    try:
        write()
    except TransientError:
        return False
    return True


@requires(Promise.UNIT_OF_WORK)
class AcknowledgedWriteChecks(AreaChecks):
    area = "unit_of_work"

    def test_write_beside_an_open_unit_survives_its_commit(self, open_store: Callable[..., Storage]) -> None:
        """A write through a second store on the thread holding another store's open transaction() is either
        refused with a TransientError or, once acknowledged, still there after that unit commits, next to
        the unit's own writes (before and after the second write)."""
        holder, other = open_store(), open_store()
        ref = self.define(holder)
        acknowledged: list[str] = []
        with holder.transaction():
            if _acknowledged(lambda: other.start_run("beside-first", ref, {"by": "other"})):
                acknowledged.append("beside-first")
            holder.start_run("unit-run", ref, {"by": "unit"})
            if _acknowledged(lambda: other.start_run("beside-later", ref, {"by": "other"})):
                acknowledged.append("beside-later")
        reader = open_store()
        present = {r.run_id: r.input for r in reader.list_runs()}
        assert present.get("unit-run") == {"by": "unit"}, "the unit of work's own write was lost"
        lost = [run for run in acknowledged if present.get(run) != {"by": "other"}]
        assert not lost, f"acknowledged writes {lost} vanished when the other store's unit of work committed"

    @requires(Promise.SIGNALS)
    def test_signal_beside_an_open_unit_survives_its_commit(self, open_store: Callable[..., Storage]) -> None:
        """A signal sent through a second store while another store's unit of work is open on the same thread
        (and writes a different run) is either refused with a TransientError or still there after the
        unit commits, and the run it went to is runnable (woken, when the store promises wake_on_input)."""
        holder, other = open_store(), open_store()
        self.waiting(holder, "signalled")
        ref = self.define(holder)
        with holder.transaction():
            holder.start_run("unit-run", ref)
            sent = _acknowledged(lambda: other.send_signal("signalled", "go", {"n": 1}, "beside"))
        reader = open_store()
        assert reader.get_run("unit-run") is not None, "the unit of work's own write was lost"
        if sent:
            signals = [(s.dedup_key, s.payload) for s in reader.list_signals("signalled")]
            assert signals == [("beside", {"n": 1})], "an acknowledged signal vanished when the unit committed"
            run = reader.get_run("signalled")
            assert run is not None and run.status.value == "pending", "the signal's wake-up was lost"
