"""The scenarios ``kit run`` knows: a workflow, its inputs, signals, handlers and expected ends.

Every scenario's end is determined by its input alone (whatever the timing,
the replicas or the backend), so a run that ends otherwise is a bug in the
runtime or the store. Handlers are idempotent (commands may run twice).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kit.contract import JSON, Command, CommandStatus, Run, RunStatus
from kit.runtime.worker import CommandContext, CommandError, Handler

__all__ = ["HANDLERS", "SCENARIOS", "Expected", "Scenario", "scenario_names", "verify"]


@dataclass(frozen=True)
class Expected:
    status: RunStatus
    output: JSON = None
    error: JSON = None
    error_kind: str | None = None
    """When set, only ``error["kind"]`` is compared (the message is informational)."""
    completed_commands: tuple[str, ...] = ()
    """Commands that must have completed (compensations, for instance)."""


def _no_signals(data: JSON) -> list[tuple[str, JSON]]:
    return []


@dataclass(frozen=True)
class Scenario:
    name: str
    workflow: str
    summary: str
    make_input: Callable[[int], JSON]
    expect: Callable[[JSON], Expected]
    signals: Callable[[JSON], list[tuple[str, JSON]]] = field(default=_no_signals)
    """Signals (name, payload) the kit sends to each run, each twice (the second is a duplicate)."""


# -- handlers -------------------------------------------------------------
def _tag(key: str, value: JSON = True) -> Handler:
    def handler(ctx: CommandContext, data: JSON) -> JSON:
        return {**(data if isinstance(data, dict) else {"value": data}), key: value}

    return handler


def _increment(ctx: CommandContext, data: JSON) -> JSON:
    return {"n": int(data["n"]) + 1}


def _charge_card(ctx: CommandContext, data: JSON) -> JSON:
    if data.get("card") == "declined":
        raise CommandError({"reason": "card declined", "order": data["order"]}, retryable=False)
    if ctx.attempt == 1:  # the gateway times out once: a retry, then success
        raise CommandError({"reason": "gateway timeout"}, retryable=True)
    return {**data, "charged": True}


def _hold_seat(ctx: CommandContext, data: JSON) -> JSON:
    return {"order": data["order"], "seat": f"{data['order'] % 40 + 1}A"}


def _notify_customer(ctx: CommandContext, data: JSON) -> JSON:
    ctx.store.request_cancel(ctx.run_id, "customer changed their mind")  # the customer answers: cancel
    return {"notified": True}


HANDLERS: Mapping[str, Handler] = {
    "reserve": _tag("reserved"),
    "charge": _tag("charged"),
    "ship": _tag("shipped"),
    "request_approval": _tag("requested"),
    "fulfil": _tag("fulfilled"),
    "wake_up": _tag("awake"),
    "book_flight": _tag("flight", "booked"),
    "book_hotel": _tag("hotel", "booked"),
    "charge_card": _charge_card,
    "cancel_hotel": _tag("hotel", "cancelled"),
    "cancel_flight": _tag("flight", "cancelled"),
    "increment": _increment,
    "hold_seat": _hold_seat,
    "notify_customer": _notify_customer,
    "release_seat": _tag("released"),
}


# -- scenarios ------------------------------------------------------------
def _order(i: int) -> JSON:
    return {"order": i}


def _saga_expect(data: JSON) -> Expected:
    if data["card"] == "declined":
        return Expected(
            RunStatus.FAILED,
            error={"reason": "card declined", "order": data["order"]},
            completed_commands=("cancel_hotel", "cancel_flight"),
        )
    return Expected(RunStatus.COMPLETED, output={**data, "charged": True})


def _seat(data: JSON) -> JSON:
    return {"order": data["order"], "seat": f"{data['order'] % 40 + 1}A"}


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "order",
            "order",
            "three commands in sequence",
            _order,
            lambda d: Expected(
                RunStatus.COMPLETED, output={**d, "reserved": True, "charged": True, "shipped": True}
            ),
        ),
        Scenario(
            "approval",
            "approval",
            "a command, then wait for a signal",
            _order,
            lambda d: Expected(
                RunStatus.COMPLETED, output={"order": d["order"], "approved_by": "kit", "fulfilled": True}
            ),
            signals=lambda d: [("approve", {"order": d["order"], "approved_by": "kit"})],
        ),
        Scenario(
            "sleep",
            "sleep",
            "three durable timers, then a command",
            _order,
            lambda d: Expected(RunStatus.COMPLETED, output={**d, "awake": True}),
        ),
        Scenario(
            "saga",
            "saga",
            "a saga; every third card is declined and compensated",
            lambda i: {"order": i, "card": "declined" if i % 3 == 2 else "visa"},
            _saga_expect,
        ),
        Scenario(
            "loop",
            "loop",
            "150 commands in a row (300 history events)",
            lambda i: {"n": 0},
            lambda d: Expected(RunStatus.COMPLETED, output={"n": 150}),
        ),
        Scenario(
            "cancel",
            "cancel",
            "cancelled mid-way; the seat is released",
            _order,
            lambda d: Expected(
                RunStatus.CANCELLED,
                error={**_seat(d), "released": True},
                completed_commands=("release_seat",),
            ),
        ),
        Scenario(
            "runaway",
            "runaway",
            "an endless loop: fails on fuel, nothing else does",
            _order,
            lambda d: Expected(RunStatus.FAILED, error_kind="fuel_exhausted"),
        ),
    )
}


def scenario_names() -> list[str]:
    return list(SCENARIOS)


def verify(scenario: Scenario, run: Run, commands: list[Command]) -> str | None:
    """``None`` if ``run`` ended as ``scenario`` says it must, else what differs."""
    from kit.contract.validation import json_equal

    want = scenario.expect(run.input)
    if run.status is not want.status:
        return (
            f"run {run.run_id} ended {run.status.value}, expected {want.status.value} (error={run.error!r})"
        )
    if want.error_kind is not None:
        kind = run.error.get("kind") if isinstance(run.error, dict) else None
        if kind != want.error_kind:
            return f"run {run.run_id} failed with {run.error!r}, expected error kind {want.error_kind!r}"
    elif not json_equal(run.output, want.output) or not json_equal(run.error, want.error):
        return (
            f"run {run.run_id} ended with output={run.output!r} error={run.error!r}, expected "
            f"output={want.output!r} error={want.error!r}"
        )
    done = {c.name for c in commands if c.status is CommandStatus.COMPLETED}
    missing = [name for name in want.completed_commands if name not in done]
    if missing:
        return f"run {run.run_id} never completed {', '.join(missing)}"
    return None
