"""Command workers: claim commands, run registered Python handlers, heartbeat, complete or fail.

A handler is ``handler(ctx, input) -> result``. Raising :class:`CommandError`
fails the attempt with that error (``retryable=False`` fails the command for
good); any other exception is a retryable failure. Guarantees:

* Completion and failure are fenced by the store; ``claim_lost`` or
  ``terminal`` (someone else finished it, or the run ended) is accepted and
  never retried, so a handler may run more than once but at most one result
  counts: handlers must be idempotent.
* While a handler runs longer than a third of the lease, a heartbeat thread
  (with its own store) renews the claim; a lost heartbeat sets ``ctx.lost``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Protocol

from kit.contract import JSON, CommandClaim, Outcome, Storage
from kit.contract.errors import ConnectionLost, KitError
from kit.runtime.stats import RuntimeStats

__all__ = [
    "DEFAULT_COMMAND_LEASE",
    "CommandContext",
    "CommandError",
    "CommandWorker",
    "Handler",
    "Heartbeats",
]

DEFAULT_COMMAND_LEASE = timedelta(seconds=30)


class Handler(Protocol):
    def __call__(self, ctx: CommandContext, input: JSON, /) -> JSON: ...


class CommandError(Exception):
    """Fail this attempt with ``error`` (a JSON value); ``retryable=False`` fails the command for good."""

    def __init__(self, error: JSON, retryable: bool = False) -> None:
        super().__init__(str(error))
        self.error = error
        self.retryable = retryable


@dataclass
class CommandContext:
    """What a handler knows about its attempt. ``store`` is the worker's own (use it on this thread)."""

    claim: CommandClaim
    store: Storage
    lease: timedelta
    beats: int = 0
    lost: threading.Event = field(default_factory=threading.Event)
    started: float = field(default_factory=time.monotonic)

    @property
    def run_id(self) -> str:
        return self.claim.run_id

    @property
    def attempt(self) -> int:
        return self.claim.attempt

    def heartbeat(self) -> Outcome:
        """Renew the claim now (from the handler's thread); ``claim_lost`` sets ``lost``."""
        outcome = self.store.heartbeat_command(self.claim, self.lease)
        self._beaten(outcome)
        return outcome

    def _beaten(self, outcome: Outcome) -> None:
        if outcome is Outcome.RENEWED:
            self.beats += 1
        else:
            self.lost.set()


class Heartbeats:
    """A thread that renews the claims of long-running handlers, on a store of its own."""

    def __init__(self, open_store: Callable[[], Storage], lease: timedelta, stats: RuntimeStats) -> None:
        self._open = open_store
        self._interval = lease.total_seconds() / 3
        self._stats = stats
        self._running: dict[str, CommandContext] = {}
        self._cond = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None

    def track(self, ctx: CommandContext) -> None:
        with self._cond:
            self._running[ctx.claim.command_id] = ctx
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="kit-heartbeats", daemon=True)
                self._thread.start()

    def untrack(self, ctx: CommandContext) -> None:
        with self._cond:
            self._running.pop(ctx.claim.command_id, None)

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        store: Storage | None = None
        try:
            while True:
                with self._cond:
                    self._cond.wait(self._interval)
                    if self._stop:
                        return
                    due = [
                        c for c in self._running.values() if time.monotonic() - c.started >= self._interval
                    ]
                for ctx in due:
                    try:
                        store = store or self._open()
                        ctx._beaten(store.heartbeat_command(ctx.claim, ctx.lease))
                        self._stats.command("heartbeat")
                    except KitError as exc:
                        self._stats.fault("heartbeat", str(exc))
                        if isinstance(exc, ConnectionLost) and store is not None:
                            store.close()
                            store = None
        finally:
            if store is not None:
                store.close()


class CommandWorker:
    """Runs handlers for claimed commands on one store (not thread-safe: one per thread)."""

    def __init__(
        self,
        store: Storage,
        handlers: Mapping[str, Handler],
        *,
        worker_id: str | None = None,
        lease: timedelta = DEFAULT_COMMAND_LEASE,
        batch: int = 1,
        queues: Sequence[str] | None = None,
        retry_after: timedelta = timedelta(milliseconds=10),
        stats: RuntimeStats | None = None,
        heartbeats: Heartbeats | None = None,
        on_done: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.handlers = dict(handlers)
        self.worker_id = worker_id or f"worker-{uuid.uuid4().hex[:10]}"
        self.lease, self.batch, self.queues, self.retry_after = lease, batch, queues, retry_after
        self.stats = stats if stats is not None else RuntimeStats()
        self.heartbeats = heartbeats
        self.on_done = on_done

    def poll(self) -> int:
        """Claim up to ``batch`` commands and run each once; return how many were claimed."""
        claims = self.store.claim_commands(self.worker_id, self.lease, self.batch, self.queues)
        for claim in claims:
            self.run(claim)
        return len(claims)

    def run(self, claim: CommandClaim) -> str:
        """Run the handler for ``claim`` and report the result once; return the store's outcome."""
        ctx = CommandContext(claim, self.store, self.lease)
        handler = self.handlers.get(claim.name)
        if self.heartbeats is not None:
            self.heartbeats.track(ctx)
        try:
            if handler is None:
                raise CommandError(
                    {
                        "type": "UnknownCommand",
                        "message": (
                            f"no handler is registered for command {claim.name!r}: register one with the worker"
                        ),
                    }
                )
            result = handler(ctx, claim.input)
        except CommandError as exc:
            outcome = self._fail(ctx, exc.error, exc.retryable)
        except Exception as exc:  # noqa: BLE001 -- a handler bug is a retryable failure, not a crash
            outcome = self._fail(ctx, {"type": type(exc).__name__, "message": str(exc)}, True)
        else:
            outcome = self._report(ctx, lambda: self.store.complete_command(claim, result))
        finally:
            if self.heartbeats is not None:
                self.heartbeats.untrack(ctx)
        return outcome

    def _fail(self, ctx: CommandContext, error: JSON, retryable: bool) -> str:
        return self._report(
            ctx,
            lambda: self.store.fail_command(
                ctx.claim, error, retry_after=self.retry_after, retryable=retryable
            ),
        )

    def _report(self, ctx: CommandContext, call: Callable[[], Outcome]) -> str:
        try:
            outcome = call()
        except ConnectionLost:
            raise
        except KitError as exc:
            self.stats.fault("command", str(exc))
            return "error"
        self.stats.command(outcome.value)
        if outcome in (Outcome.COMPLETED, Outcome.FAILED, Outcome.RETRY_SCHEDULED) and self.on_done:
            self.on_done()
        return outcome.value
