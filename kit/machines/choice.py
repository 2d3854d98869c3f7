"""Which fault machine checks a store, and which promise families it is given: by what the store declares.

Kept apart from the interpreters so ``kit check`` can name its machine (and a run with the machines off
can skip them) without importing the interpreters, the reference engine and Hypothesis.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kit.contract import Backend, Capabilities, Capability, ConfigurationError

__all__ = [
    "MACHINES",
    "MODEL_FREE",
    "REFERENCE",
    "WORKFLOW_PROMISES",
    "choose_machine",
    "declared_promises",
    "step_families",
]

REFERENCE = "reference"
MODEL_FREE = "model-free"
#: What ``kit check --machine`` accepts: ``auto`` picks by the store's declared promises.
MACHINES = ("auto", REFERENCE, MODEL_FREE)

#: The workflow promise families (the values of ``kit.contract.Promise``) whose steps and rules the model-free
#: machine can leave out. A store that declares no promises is taken to make them all; capabilities
#: (``test_clock``, ``statement_faults``, ``kill_session``, ``concurrent_connections``, ``tenancy``,
#: ``unit_of_work``...) are families by their value too.
WORKFLOW_PROMISES = (
    "leases", "generation_fencing", "expected_revision", "atomic_decision", "wake_on_input", "commands", "signals",
    "timers", "definitions", "cancel_requests", "schema_checksums",
)


def declared_promises(capabilities: Capabilities) -> frozenset[str] | None:
    """The promise families a store declares (``capabilities.promises``, names or enum members), or None.

    None means the store declares none, i.e. the whole contract (every store the kit wrote).
    """
    promises: Iterable[Any] | None = getattr(capabilities, "promises", None)
    if promises is None:
        return None
    return frozenset(str(getattr(p, "value", p)) for p in promises)


def step_families(backend: Backend, allowed: Iterable[str] | None = None) -> frozenset[str]:
    """The families of steps ``backend`` may be given: its promises and capabilities, within ``allowed``."""
    caps = backend.capabilities
    promised = declared_promises(caps)
    families = set(WORKFLOW_PROMISES) if promised is None else set(promised)
    families |= {c.value for c in caps.supported}
    if allowed is not None:
        families &= set(allowed)
    return frozenset(families)


def choose_machine(backend: Backend, requested: str = "auto") -> str:
    """``reference`` for a store that promises the whole contract on a test clock, else ``model-free``.

    An explicit ``reference`` or ``model-free`` is taken as asked.
    """
    if requested not in MACHINES:
        raise ConfigurationError(f"unknown fault machine {requested!r}: choose one of {', '.join(MACHINES)}")
    if requested != "auto":
        return requested
    caps = backend.capabilities
    promised = declared_promises(caps)
    whole = promised is None or set(WORKFLOW_PROMISES) <= promised
    return REFERENCE if whole and Capability.TEST_CLOCK in caps.supported else MODEL_FREE
