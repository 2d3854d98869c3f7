"""The workflow ABI: what a WASM workflow module may import and must export.

A workflow is a core WASM module (text format in ``scenarios/workflows/*.wat``)
that exports ``memory`` and a function ``run: [] -> []``, and imports only
from the module namespace ``durable``. Integers and (pointer, length) pairs
cross the boundary; every JSON payload is UTF-8 JSON text in linear memory.

=================  ===============================  ==========================================
import             type                             meaning
=================  ===============================  ==========================================
``value_len``      ``[] -> [i32]``                  byte length of the current value's JSON
``value_read``     ``[ptr i32] -> []``              copy the current value's JSON to ``ptr``
``perform``        ``[op i32, name_ptr i32,         await a command ``name`` with the JSON
                   name_len i32, in_ptr i32,        input at ``in_ptr`` (``in_len`` 0 means
                   in_len i32] -> [status i32]``    ``null``, -1 the current value); value =
                                                    its result or error
``sleep``          ``[op i32, millis i64] ->        await a durable timer of ``millis`` ms
                   [status i32]``                   (store clock); value = ``null``
``wait_signal``    ``[op i32, name_ptr i32,         await the oldest pending signal ``name``;
                   name_len i32] -> [status i32]``  value = its payload
``complete``       ``[ptr i32, len i32] -> []``     end the run ``completed`` with this output
``fail``           ``[ptr i32, len i32] -> []``     end the run ``failed`` with this error
``cancel``         ``[ptr i32, len i32] -> []``     end the run ``cancelled`` with this error
=================  ===============================  ==========================================

Guarantees the host gives a module:

* **Deterministic by construction.** There is no clock, randomness, I/O or
  environment import; an await returns the recorded result when the history
  has one, so every replay of a run sees exactly the same values. NaNs are
  canonicalised and fuel (not time) bounds execution.
* **Await status.** ``STATUS_OK`` (0), ``STATUS_FAILED`` (1: the command failed
  permanently; the value is its error) or ``STATUS_CANCELLED`` (2: cancellation
  was requested while this await was open; the value is ``{"reason": ...}``).
  Cancellation is delivered once per run, to the first await that cannot be
  resolved from input; the module decides what to do (compensate, then
  ``cancel``), and later awaits behave normally.
* **Operation ids.** ``op`` is a non-negative id the module chooses, stable
  across replays and unique per run (e.g. ``base + loop index``); it becomes
  the operation key ``op-<op>`` of the command or timer. Awaiting one id twice
  fails the run.
* **The current value** starts as the run's input and is replaced by the value
  of each await. JSON objects are canonical (sorted keys, no spaces), so their
  bytes do not depend on the store.
* **Endings.** ``complete``/``fail``/``cancel`` end the execution at once.
  Returning from ``run`` completes the run with output ``null``. A trap, fuel
  exhaustion, an out-of-bounds pointer or invalid JSON fails the run with an
  error naming the cause; other runs are unaffected.
* Commands are scheduled on queue ``default`` with at most ``MAX_ATTEMPTS``.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "DEFAULT_FUEL",
    "EXPORT_MEMORY",
    "EXPORT_RUN",
    "IMPORTS",
    "MAX_ATTEMPTS",
    "MAX_MEMORY_BYTES",
    "NAMESPACE",
    "PASS_VALUE",
    "STATUS_CANCELLED",
    "STATUS_FAILED",
    "STATUS_OK",
    "op_key",
]

NAMESPACE: Final = "durable"
EXPORT_RUN: Final = "run"
EXPORT_MEMORY: Final = "memory"

STATUS_OK: Final = 0
STATUS_FAILED: Final = 1
STATUS_CANCELLED: Final = 2

PASS_VALUE: Final = -1
"""``perform``'s ``in_len`` meaning "the current value is the input" (pipelines skip a copy)."""

MAX_ATTEMPTS: Final = 3
"""Attempts a command gets before it fails permanently."""

DEFAULT_FUEL: Final = 10_000_000
"""Fuel of one execution (a whole replay): generous for real workflows, ~15 ms of a runaway loop."""

MAX_MEMORY_BYTES: Final = 16 * 1024 * 1024
"""Linear memory cap; ``memory.grow`` beyond it returns -1."""

#: import name -> (param types, result types), in WASM value-type names.
IMPORTS: Final[dict[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
    "value_len": ((), ("i32",)),
    "value_read": (("i32",), ()),
    "perform": (("i32", "i32", "i32", "i32", "i32"), ("i32",)),
    "sleep": (("i32", "i64"), ("i32",)),
    "wait_signal": (("i32", "i32", "i32"), ("i32",)),
    "complete": (("i32", "i32"), ()),
    "fail": (("i32", "i32"), ()),
    "cancel": (("i32", "i32"), ()),
}


def op_key(op: int) -> str:
    """The operation key of await ``op``: the command's or timer's key in the store."""
    return f"op-{op}"
