"""The store cursor's queue (adapters._sql.pipeline), without a database: statements leave in the order
they were queued, the BEGIN travels with the first of them, a result read sends the queue, a failed send
leaves nothing queued, and a block that raises drops what it never sent."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from adapters._sql.pipeline import SecondStatement, Sent, Statement, StoreCursor


class _Wire:
    """A sender that records each send (one round trip) and answers each statement with its own text."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.sends: list[tuple[tuple[str, ...], list[str]]] = []
        self.fail_on = fail_on

    def __call__(self, begins: Sequence[str], statements: Sequence[Statement], end: str | None = None) -> list[Sent]:
        self.sends.append((tuple(begins), [sql for sql, _ in statements] + ([] if end is None else [end])))
        if self.fail_on is not None and any(sql == self.fail_on for sql, _ in statements):
            raise RuntimeError(f"the server refused {self.fail_on}")
        return [Sent([(sql, tuple(params or ()))], 1, ("text",)) for sql, params in statements]


class _Driver:
    """The driver cursor under the store cursor: only what the straight path uses."""

    def __init__(self) -> None:
        self.executed: list[str] = []

    def execute(self, sql: str, params: Sequence[object] | None = None) -> None:
        self.executed.append(sql)


def test_queued_statements_leave_together_in_order_with_the_begin_when_a_result_is_read() -> None:
    wire = _Wire()
    cursor = StoreCursor(_Driver(), wire)
    cursor.pending = ("BEGIN",)
    with cursor.batching():
        first = cursor.execute("S1", (1,))
        second = cursor.execute("S2")
        assert wire.sends == [], "a queued statement was sent before any result was needed"
        assert second.fetchone() == ("S2", ())
        assert first.fetchone() == ("S1", (1,))
        third = cursor.execute("S3")
    assert wire.sends == [(("BEGIN",), ["S1", "S2"]), ((), ["S3"])]
    assert third.rowcount == 1 and cursor.pending is None


def test_outside_a_batch_the_begin_travels_with_the_first_statement_then_statements_go_straight() -> None:
    wire, driver = _Wire(), _Driver()
    cursor = StoreCursor(driver, wire)
    cursor.pending = ("SET TRANSACTION X", "START TRANSACTION")
    cursor.execute("S1", (1,))
    assert cursor.fetchone() == ("S1", (1,))
    cursor.execute("COMMIT")
    assert wire.sends == [(("SET TRANSACTION X", "START TRANSACTION"), ["S1"])]
    assert driver.executed == ["COMMIT"]


def test_a_failed_send_raises_and_a_block_that_raises_drops_what_it_queued() -> None:
    wire, driver = _Wire(fail_on="BAD"), _Driver()
    cursor = StoreCursor(driver, wire)
    with pytest.raises(RuntimeError, match="refused BAD"), cursor.batching():
        cursor.execute("W1")
        cursor.execute("BAD")
    with pytest.raises(KeyError), cursor.batching():
        cursor.execute("NEVER SENT")
        raise KeyError("the operation failed before reading anything")
    cursor.execute("ROLLBACK")
    assert [statements for _, statements in wire.sends] == [["W1", "BAD"]]
    assert driver.executed == ["ROLLBACK"], "a statement of the failed block was sent after it"


def test_a_batch_is_one_hook_point_before_it_is_sent_and_never_carries_a_commit() -> None:
    from kit.connections import HookedCursor
    from kit.runtime.counting import StatementCounter

    seen: list[str] = []
    counter = StatementCounter()

    def hook(point: str) -> None:
        seen.append(point)
        counter.hook(point)

    cursor = HookedCursor(_Driver(), hook)
    order: list[str] = []
    assert cursor.execute_batch(["BEGIN", "S1", "S2"], lambda: order.append(f"sent after {len(seen)}") or 7) == 7
    assert seen == ["BEGIN; S1; S2"] and order == ["sent after 1"]
    assert counter.count == 3, "the counter counts each statement of a batch"
    with pytest.raises(ValueError, match="never batched"):
        cursor.execute_batch(["UPDATE t", "COMMIT"], lambda: None)
    # a read-only transaction's COMMIT may end a batch: one point, no COMMIT or COMMITTED point of its own
    assert cursor.execute_batch(["BEGIN", "S3", "COMMIT"], lambda: 8, ends_read=True) == 8
    assert seen[-1] == "BEGIN; S3; COMMIT" and "COMMIT" not in seen and "COMMITTED" not in seen
    with pytest.raises(ValueError, match="never batched"):
        cursor.execute_batch(["BEGIN", "COMMIT", "S4", "COMMIT"], lambda: None, ends_read=True)
    with pytest.raises(ValueError, match="last statement must be"):
        cursor.execute_batch(["BEGIN", "S5"], lambda: None, ends_read=True)


def test_a_block_alone_sends_one_statement_and_refuses_a_second_before_sending_it() -> None:
    wire, driver = _Wire(), _Driver()
    cursor = StoreCursor(driver, wire)
    with cursor.alone():
        cursor.execute("S1")
        with pytest.raises(SecondStatement):
            cursor.execute("S2")
    assert driver.executed == ["S1"] and wire.sends == []
    with cursor.alone(), pytest.raises(SecondStatement), cursor.batching():  # queued, then refused:
        cursor.execute("S3")                                                  # nothing of either is sent
        cursor.execute("S4")
    assert driver.executed == ["S1"] and wire.sends == []
    cursor.execute("S5")
    cursor.execute("S6")  # outside the block: no limit
    assert driver.executed == ["S1", "S5", "S6"]


def test_a_block_alone_is_refused_inside_an_open_transaction() -> None:
    cursor = StoreCursor(_Driver(), _Wire())
    cursor.pending = ("BEGIN",)
    with pytest.raises(RuntimeError, match="open transaction"), cursor.alone():
        pass


def test_a_snapshot_block_sends_its_commit_with_its_last_reads_and_then_refuses_more() -> None:
    """``batching(end=COMMIT)``: the COMMIT leaves in the block's last send, after every queued statement;
    the cursor says the transaction ended, and a statement after it is refused before it is sent (it would
    run outside the snapshot). With nothing queued at the block's end, nothing is sent and nothing ended."""
    wire, driver = _Wire(), _Driver()
    cursor = StoreCursor(driver, wire)
    cursor.pending = ("BEGIN",)
    with cursor.batching("COMMIT"):
        run = cursor.execute("S1")
        cursor.execute("S2")
    assert wire.sends == [(("BEGIN",), ["S1", "S2", "COMMIT"])]
    assert cursor.ended and run.fetchone() == ("S1", ())
    with pytest.raises(RuntimeError, match="committed with its last reads"):
        cursor.execute("S3")
    assert wire.sends == [(("BEGIN",), ["S1", "S2", "COMMIT"])] and driver.executed == []
    cursor.ended = False
    with cursor.batching("COMMIT"):
        pass
    assert len(wire.sends) == 1 and not cursor.ended
