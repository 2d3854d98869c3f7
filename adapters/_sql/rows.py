"""Column lists and row-to-entity mapping shared by every SQL dialect.

Every dialect stores time as integer microseconds since the epoch, flags as
0/1 integers and JSON as text (or a JSON type read back as text), so one
mapping serves all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kit.clock import from_micros
from kit.contract.entities import (
    Command,
    CommandStatus,
    Definition,
    DefinitionRef,
    Event,
    Run,
    RunStatus,
    Signal,
    SignalStatus,
    Timer,
    TimerStatus,
)
from kit.contract.validation import decode_json

__all__ = [
    "COMMAND_COLUMNS",
    "DEFINITION_COLUMNS",
    "EVENT_COLUMNS",
    "RUN_COLUMNS",
    "SIGNAL_COLUMNS",
    "TIMER_COLUMNS",
    "to_command",
    "to_definition",
    "to_event",
    "to_run",
    "to_signal",
    "to_timer",
]

RUN_COLUMNS = (
    "run_id, tenant_id, def_name, def_version, def_digest, status, revision, claim_owner, "
    "claim_generation, claim_expires_at, wake_at, wakeup_pending, cancel_requested, "
    "cancel_reason, input, output, error, idempotency_key, created_at, updated_at"
)
EVENT_COLUMNS = "run_id, seq, kind, operation_key, payload, revision, created_at"
COMMAND_COLUMNS = (
    "command_id, run_id, operation_key, name, queue, input, status, attempt, max_attempts, "
    "not_before, claim_owner, claim_generation, claim_expires_at, result, error, consumed"
)
SIGNAL_COLUMNS = "signal_id, run_id, name, payload, dedup_key, status, consumed_revision, sent_at"
TIMER_COLUMNS = "timer_id, run_id, operation_key, fire_at, status"
DEFINITION_COLUMNS = "name, version, digest, body, created_at"


def _time(value: Any) -> Any:
    return None if value is None else from_micros(int(value))


def _json(value: Any) -> Any:
    if isinstance(value, str | bytes | bytearray):
        return decode_json(bytes(value) if isinstance(value, bytearray) else value)
    # A driver that parsed a JSON column itself cannot tell the JSON string "x" from
    # the text x; dialects must hand JSON back as text.
    raise TypeError(
        f"JSON column came back as {type(value).__name__}: configure the driver to return JSON as text"
    )


def to_run(row: Sequence[Any]) -> Run:
    return Run(
        run_id=row[0],
        tenant_id=row[1],
        definition=DefinitionRef(row[2], row[3], row[4]),
        status=RunStatus(row[5]),
        revision=int(row[6]),
        claim_owner=row[7],
        claim_generation=int(row[8]),
        claim_expires_at=_time(row[9]),
        wake_at=_time(row[10]),
        wakeup_pending=bool(row[11]),
        cancel_requested=bool(row[12]),
        cancel_reason=row[13],
        input=_json(row[14]),
        output=_json(row[15]),
        error=_json(row[16]),
        idempotency_key=row[17],
        created_at=from_micros(int(row[18])),
        updated_at=from_micros(int(row[19])),
    )


def to_event(row: Sequence[Any]) -> Event:
    return Event(row[0], int(row[1]), row[2], row[3], _json(row[4]), int(row[5]), from_micros(int(row[6])))


def to_command(row: Sequence[Any]) -> Command:
    return Command(
        command_id=str(row[0]),
        run_id=row[1],
        operation_key=row[2],
        name=row[3],
        queue=row[4],
        input=_json(row[5]),
        status=CommandStatus(row[6]),
        attempt=int(row[7]),
        max_attempts=int(row[8]),
        not_before=from_micros(int(row[9])),
        claim_owner=row[10],
        claim_generation=int(row[11]),
        claim_expires_at=_time(row[12]),
        result=_json(row[13]),
        error=_json(row[14]),
        consumed=bool(row[15]),
    )


def to_signal(row: Sequence[Any]) -> Signal:
    return Signal(
        signal_id=str(row[0]),
        run_id=row[1],
        name=row[2],
        payload=_json(row[3]),
        dedup_key=row[4],
        status=SignalStatus(row[5]),
        consumed_revision=None if row[6] is None else int(row[6]),
        sent_at=from_micros(int(row[7])),
    )


def to_timer(row: Sequence[Any]) -> Timer:
    return Timer(str(row[0]), row[1], row[2], from_micros(int(row[3])), TimerStatus(row[4]))


def to_definition(row: Sequence[Any]) -> Definition:
    return Definition(row[0], row[1], row[2], bytes(row[3]), from_micros(int(row[4])))
