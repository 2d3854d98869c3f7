"""Stored values are values: the reference engine never keeps or hands out a caller's live object.

A JSON payload is a ``list`` or ``dict`` the caller can still mutate. Every
write stores a copy, and every read returns a fresh copy, so mutating an
argument after a write, or a value a read returned, changes nothing stored:
what a SQL store gets for free by encoding to text.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

from kit.contract.entities import (
    Command,
    CommandClaim,
    Event,
    Run,
    Signal,
    SignalReceipt,
    Snapshot,
    StartResult,
)
from kit.contract.validation import copy_json

__all__ = ["detached", "detached_all"]

E = TypeVar("E")


def detached(entity: E) -> E:
    """``entity`` with every JSON payload in it replaced by a copy that shares nothing with the store."""
    value: object = entity
    if isinstance(value, Run):
        value = replace(value, input=copy_json(value.input), output=copy_json(value.output),
                        error=copy_json(value.error))
    elif isinstance(value, Event):
        value = replace(value, payload=copy_json(value.payload))
    elif isinstance(value, Command):
        value = replace(value, input=copy_json(value.input), result=copy_json(value.result),
                        error=copy_json(value.error))
    elif isinstance(value, Signal):
        value = replace(value, payload=copy_json(value.payload))
    elif isinstance(value, CommandClaim):
        value = replace(value, input=copy_json(value.input))
    elif isinstance(value, StartResult):
        value = replace(value, run=detached(value.run))
    elif isinstance(value, SignalReceipt):
        value = replace(value, signal=None if value.signal is None else detached(value.signal))
    elif isinstance(value, Snapshot):
        value = replace(
            value, run=detached(value.run), history=tuple(detached_all(value.history)),
            command_results=tuple(detached_all(value.command_results)), signals=tuple(detached_all(value.signals)),
        )
    return value  # type: ignore[return-value]


def detached_all(entities: list[E] | tuple[E, ...]) -> list[E]:
    """:func:`detached` of each."""
    return [detached(e) for e in entities]
