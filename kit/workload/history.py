"""The operation history of a stress run: one JSON object per line, written as it happens.

Every store operation a worker makes is two entries, Jepsen style: an
``invoke`` and its completion, which is ``ok`` (it happened, with its result),
``fail`` (it certainly did not happen: a protocol refusal, or a fault the store
guarantees was rolled back) or ``info`` (unknown: a lost acknowledgement, a
dropped or killed session). Faults, crashes and phase changes are single
``info`` entries. Each entry carries:

``index``  position in the history (0, 1, ...); a completion names its ``invoke``
``type``   ``invoke`` / ``ok`` / ``fail`` / ``info``
``process`` the worker incarnation (``d0.1`` is decider slot 0, first life), or
            ``client``, ``clock``, ``nemesis``, ``kit``; ``d0.1~dup`` is its duplicate sender
``f``      the operation (``claim_runs``, ``commit``, ``complete``, ...)
``tenant`` the tenant whose store made the call
``t``      seconds since the run began, on the kit's monotonic clock
``store_us`` the store clock as last sampled *before* this entry (a lower bound of
            the store time at this entry; integer microseconds since the epoch)
``run`` / ``command`` / ``gen``  what the operation names: run id, command id,
            claim generation
``value``  arguments (invoke) or result (completion); ``error`` the fault's text

Lost acknowledgements are ``info``: never counted as success or failure.
Guarantees: entries are appended in ``index`` order, one line each; the file is
flushed by the first entry written ``flush_s`` after the previous flush (the
store-clock sampler writes one every few tens of milliseconds) and at
:meth:`Recorder.close`; the recorder keeps nothing in memory (pending
invocations live with their callers), so memory does not grow with the run.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kit.contract import JSON, Event, KitError
from kit.contract.errors import ConnectionLost
from kit.faults import LostAcknowledgement

__all__ = ["FAIL", "INFO", "INVOKE", "OK", "Pending", "Recorder", "classify", "history_digest", "read_entries"]

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
_KEYS = ("run", "command", "gen")

Listener = Callable[[dict[str, Any], "Pending | None"], None]


def classify(exc: BaseException) -> str:
    """``info`` when the store cannot say whether the write landed, else ``fail``.

    A lost acknowledgement and a lost session are unknown; every other kit error
    is a fault the store rolled back (a refusal, a deadlock victim, a lock
    timeout, a bad argument). Anything that is not a kit error is unknown too.
    """
    if isinstance(exc, (LostAcknowledgement, ConnectionLost)):
        return INFO
    if isinstance(exc, KitError):
        return FAIL
    return INFO


def history_digest(events: Iterable[Event | dict[str, Any]]) -> str:
    """A short digest of a history (seq, kind, key, payload as a JSON value, revision)."""
    h = hashlib.sha1(usedforsecurity=False)
    for e in events:
        row = e if isinstance(e, dict) else {"seq": e.seq, "kind": e.kind, "operation_key": e.operation_key,
                                              "payload": e.payload, "revision": e.revision}
        h.update(json.dumps([row["seq"], row["kind"], row["operation_key"], row["payload"], row["revision"]],
                            sort_keys=True, separators=(",", ":"), default=str).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


@dataclass(slots=True)
class Pending:
    """An invoked operation waiting for its completion."""

    index: int
    process: str
    f: str
    tenant: str
    t: float
    keys: dict[str, Any] = field(default_factory=dict)
    done: bool = False
    value: Any = None
    """The invocation's arguments, for listeners of its completion (not written again)."""


class Recorder:
    """Appends history entries to ``path`` (thread-safe); see the module docstring for the format."""

    def __init__(self, path: Path, flush_s: float = 0.5, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._clock = clock
        self.t0 = clock()
        self.store_us: int | None = None
        self.entries = 0
        self.listeners: list[Listener] = []
        self._lock = threading.Lock()
        self._file: IO[str] | None = open(path, "w", encoding="utf-8", buffering=1 << 16)  # noqa: SIM115
        self._flush_s = flush_s
        self._flushed = self.t0

    def now(self) -> float:
        """Seconds since the run began."""
        return self._clock() - self.t0

    def _append(self, entry: dict[str, Any], pending: Pending | None) -> dict[str, Any]:
        with self._lock:
            if self._file is None:
                return entry
            entry["index"] = self.entries
            entry["t"] = round(self._clock() - self.t0, 6)
            entry["store_us"] = self.store_us
            self.entries += 1
            self._file.write(json.dumps(entry, separators=(",", ":"), default=str) + "\n")
            if self._clock() - self._flushed >= self._flush_s:
                self._file.flush()
                self._flushed = self._clock()
        for listener in self.listeners:
            listener(entry, pending)
        return entry

    def invoke(self, process: str, f: str, tenant: str, value: JSON = None, **keys: Any) -> Pending:
        """Record that ``process`` calls ``f``; ``keys`` are ``run`` / ``command`` / ``gen``."""
        entry: dict[str, Any] = {"type": INVOKE, "process": process, "f": f, "tenant": tenant}
        entry.update({k: v for k, v in keys.items() if v is not None})
        if value is not None:
            entry["value"] = value
        pending = Pending(0, process, f, tenant, 0.0, {k: v for k, v in keys.items() if v is not None})
        done = self._append(entry, None)
        pending.index, pending.t = int(done.get("index", -1)), float(done.get("t", 0.0))
        return pending

    def complete(self, pending: Pending, kind: str, value: JSON = None, error: str | None = None) -> None:
        """Record how ``pending`` ended: ``ok``, ``fail`` or ``info``."""
        if pending.done:
            return
        pending.done = True
        entry: dict[str, Any] = {"type": kind, "process": pending.process, "f": pending.f,
                                 "tenant": pending.tenant, "invoke": pending.index, **pending.keys}
        if value is not None:
            entry["value"] = value
        if error is not None:
            entry["error"] = error[:300]
        self._append(entry, pending)

    def info(self, process: str, f: str, value: JSON = None, tenant: str = "", **keys: Any) -> None:
        """A single ``info`` entry: a fault, a crash, a phase change."""
        entry: dict[str, Any] = {"type": INFO, "process": process, "f": f}
        if tenant:
            entry["tenant"] = tenant
        entry.update({k: v for k, v in keys.items() if v is not None})
        if value is not None:
            entry["value"] = value
        self._append(entry, None)

    def sampled(self, store_us: int) -> None:
        """The store clock read ``store_us`` (stamped on every later entry)."""
        with self._lock:
            if self.store_us is None or store_us > self.store_us:
                self.store_us = store_us

    def flush(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.flush()
                self._flushed = self._clock()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def read_entries(path: Path) -> Iterator[dict[str, Any]]:
    """The entries of a history file, in order; a line cut short by a crash ends the iteration."""
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                return
            if isinstance(entry, dict):
                yield entry
