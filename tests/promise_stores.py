"""Stores that keep fewer promises, or fence by opaque tokens: the reference engine behind a wrapper.

:class:`WithholdingBackend` declares some promise families withheld and then really
breaks them: every operation of a withheld family raises :class:`Withheld`, and
the families that are behaviours rather than operations are broken outright
(leases never expire, stale generations and wrong revisions are accepted,
tenants share one store, the schema is never verified). So a check that uses a
withheld family without declaring it fails instead of passing by luck: running
the suite on it proves each check states every promise it needs.

With ``tokens=True`` every claim carries a random opaque token and every fenced
call with a token other than the one issued for that claim raises
:class:`WrongToken`, which proves the kit passes tokens back untouched.

Factories for ``kit check tests.promise_stores:<factory>`` are at the bottom.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import datetime, timedelta

from kit.contract import (
    JSON,
    Capabilities,
    Capability,
    ClockMode,
    Command,
    CommandClaim,
    Decision,
    Definition,
    DefinitionRef,
    Event,
    MigrationSpec,
    Outcome,
    Promise,
    Run,
    RunClaim,
    RunStatus,
    Signal,
    SignalReceipt,
    Snapshot,
    StartResult,
    StatementHook,
    Storage,
    Timer,
    Transaction,
)
from kit.reference.backend import MemoryBackend, MemoryDatabase
from kit.reference.store import MemoryStore

__all__ = [
    "Withheld",
    "WithholdingBackend",
    "WrongToken",
    "from_env",
    "no_leases",
    "no_test_clock",
    "no_timers",
    "no_wake_on_input",
    "token_fenced",
]

#: How long a lease lasts in a store that makes no lease promise: for ever, in practice.
FOREVER = timedelta(days=3650)


class Withheld(AssertionError):
    """A check used a promise family the store declared withheld (the check must require it)."""


class WrongToken(AssertionError):
    """A fenced call carried a claim token other than the one the store issued: the kit changed it."""


class WithholdingStore:
    """The reference engine, keeping only the promises its backend declares."""

    def __init__(self, inner: MemoryStore, withheld: frozenset[Promise], tokens: dict[tuple[str, str, str, int], str] | None,
                 tenant_id: str) -> None:
        self._inner = inner
        self._withheld = withheld
        self._tokens = tokens
        self.tenant_id = tenant_id
        self.clock_mode = inner.clock_mode

    # -- gates ------------------------------------------------------------
    def _need(self, promise: Promise, operation: str) -> None:
        if promise in self._withheld:
            raise Withheld(f"{operation} belongs to {promise.value}, which this store does not promise")

    def _check_decision(self, decision: Decision) -> None:
        if decision.next_status is RunStatus.BLOCKED:
            self._need(Promise.WAKE_ON_INPUT, "a blocked decision")
        if decision.commands or decision.consume_commands:
            self._need(Promise.COMMANDS, "a decision with commands")
        if decision.timers or decision.consume_timers or decision.cancel_timers:
            self._need(Promise.TIMERS, "a decision with timers")
        if decision.consume_signals:
            self._need(Promise.SIGNALS, "a decision consuming signals")

    def _issue(self, kind: str, ident: str, generation: int) -> str | None:
        if self._tokens is None:
            return None
        token = secrets.token_hex(8)
        self._tokens[(self.tenant_id, kind, ident, generation)] = token
        return token

    def _fence(self, kind: str, ident: str, generation: int, token: str | None) -> None:
        if self._tokens is None:
            return
        issued = self._tokens.get((self.tenant_id, kind, ident, generation))
        if issued is not None and token != issued:
            raise WrongToken(f"{kind} {ident!r} generation {generation}: got token {token!r}, issued {issued!r}")

    def _run_claim(self, claim: RunClaim) -> RunClaim:
        self._fence("run", claim.run_id, claim.generation, claim.token)
        if Promise.GENERATION_FENCING in self._withheld:
            current = self._inner.get_run(claim.run_id)
            if current is not None:  # no fencing: any claim naming the run is taken as the current one
                claim = replace(claim, worker_id=current.claim_owner or claim.worker_id,
                                generation=current.claim_generation)
        return replace(claim, token=None)

    def _command_claim(self, claim: CommandClaim) -> CommandClaim:
        self._fence("command", claim.command_id, claim.generation, claim.token)
        if Promise.GENERATION_FENCING in self._withheld:
            current = self._inner.get_command(claim.command_id)
            if current is not None:
                claim = replace(claim, worker_id=current.claim_owner or claim.worker_id,
                                generation=current.claim_generation)
        return replace(claim, token=None)

    def _lease(self, lease: timedelta) -> timedelta:
        return FOREVER if Promise.LEASES in self._withheld else lease

    # -- lifecycle, schema, clock -------------------------------------------
    @property
    def migrations(self) -> Sequence[MigrationSpec]:
        return self._inner.migrations

    def close(self) -> None:
        self._inner.close()

    def migrate(self) -> list[str]:
        return self._inner.migrate()

    def verify_schema(self) -> None:
        if Promise.SCHEMA_CHECKSUMS not in self._withheld:
            self._inner.verify_schema()

    def now(self) -> datetime:
        return self._inner.now()

    def set_test_clock(self, at: datetime) -> None:
        self._inner.set_test_clock(at)

    def advance_test_clock(self, by: timedelta) -> datetime:
        return self._inner.advance_test_clock(by)

    # -- definitions and runs -------------------------------------------------
    def ensure_definition(self, name: str, version: str, digest: str, body: bytes) -> Definition:
        self._need(Promise.DEFINITIONS, "ensure_definition()")
        return self._inner.ensure_definition(name, version, digest, body)

    def get_definition(self, name: str, version: str) -> Definition | None:
        self._need(Promise.DEFINITIONS, "get_definition()")
        return self._inner.get_definition(name, version)

    def list_definition_versions(self, name: str) -> list[Definition]:
        self._need(Promise.DEFINITIONS, "list_definition_versions()")
        return self._inner.list_definition_versions(name)

    def start_run(self, run_id: str, definition: DefinitionRef, input: JSON = None,
                  idempotency_key: str | None = None) -> StartResult:
        if Promise.DEFINITIONS in self._withheld:  # no definitions kept: any reference is taken as given
            self._take_as_given(definition)
        return self._inner.start_run(run_id, definition, input, idempotency_key)

    def _take_as_given(self, ref: DefinitionRef) -> None:
        """Record ``ref`` in the engine's table as it is (the engine refuses runs of unknown definitions)."""
        with self._inner._unit() as tables:
            key = (self._inner.tenant_id, ref.name, ref.version)
            if key not in tables.definitions:
                tables.definitions[key] = Definition(ref.name, ref.version, ref.digest, b"", self._inner.now())

    def get_run(self, run_id: str) -> Run | None:
        return self._inner.get_run(run_id)

    def list_runs(self, status: RunStatus | None = None, after: str | None = None, limit: int = 100) -> list[Run]:
        return self._inner.list_runs(status, after, limit)

    def request_cancel(self, run_id: str, reason: str | None = None) -> Outcome:
        self._need(Promise.CANCEL_REQUESTS, "request_cancel()")
        return self._inner.request_cancel(run_id, reason)

    def get_history(self, run_id: str, after_seq: int = 0, limit: int | None = None) -> list[Event]:
        return self._inner.get_history(run_id, after_seq, limit)

    # -- decision claims --------------------------------------------------------
    def claim_runs(self, worker_id: str, lease: timedelta, limit: int = 1) -> list[RunClaim]:
        claims = self._inner.claim_runs(worker_id, self._lease(lease), limit)
        return [replace(c, token=self._issue("run", c.run_id, c.generation)) for c in claims]

    def renew_run_claim(self, claim: RunClaim, lease: timedelta) -> Outcome:
        self._need(Promise.LEASES, "renew_run_claim()")
        return self._inner.renew_run_claim(self._run_claim(claim), lease)

    def release_run_claim(self, claim: RunClaim) -> Outcome:
        self._need(Promise.LEASES, "release_run_claim()")
        return self._inner.release_run_claim(self._run_claim(claim))

    def load_claimed(self, claim: RunClaim) -> Snapshot | Outcome:
        return self._inner.load_claimed(self._run_claim(claim))

    def commit_decision(self, claim: RunClaim, expected_revision: int, decision: Decision) -> Outcome:
        self._check_decision(decision)
        if Promise.EXPECTED_REVISION in self._withheld:  # no revision check: the current one is assumed
            current = self._inner.get_run(claim.run_id)
            expected_revision = current.revision if current is not None else expected_revision
        return self._inner.commit_decision(self._run_claim(claim), expected_revision, decision)

    # -- commands ---------------------------------------------------------------
    def claim_commands(self, worker_id: str, lease: timedelta, limit: int = 1,
                       queues: Sequence[str] | None = None) -> list[CommandClaim]:
        self._need(Promise.COMMANDS, "claim_commands()")
        claims = self._inner.claim_commands(worker_id, self._lease(lease), limit, queues)
        return [replace(c, token=self._issue("command", c.command_id, c.generation)) for c in claims]

    def heartbeat_command(self, claim: CommandClaim, lease: timedelta) -> Outcome:
        self._need(Promise.COMMANDS, "heartbeat_command()")
        self._need(Promise.LEASES, "heartbeat_command()")
        return self._inner.heartbeat_command(self._command_claim(claim), lease)

    def complete_command(self, claim: CommandClaim, result: JSON = None) -> Outcome:
        self._need(Promise.COMMANDS, "complete_command()")
        return self._inner.complete_command(self._command_claim(claim), result)

    def fail_command(self, claim: CommandClaim, error: JSON = None, retry_after: timedelta | None = None,
                     retryable: bool = True) -> Outcome:
        self._need(Promise.COMMANDS, "fail_command()")
        return self._inner.fail_command(self._command_claim(claim), error, retry_after, retryable)

    def get_command(self, command_id: str) -> Command | None:
        self._need(Promise.COMMANDS, "get_command()")
        return self._inner.get_command(command_id)

    def list_commands(self, run_id: str) -> list[Command]:
        self._need(Promise.COMMANDS, "list_commands()")
        return self._inner.list_commands(run_id)

    # -- signals and timers -----------------------------------------------------
    def send_signal(self, run_id: str, name: str, payload: JSON, dedup_key: str) -> SignalReceipt:
        self._need(Promise.SIGNALS, "send_signal()")
        return self._inner.send_signal(run_id, name, payload, dedup_key)

    def list_signals(self, run_id: str) -> list[Signal]:
        self._need(Promise.SIGNALS, "list_signals()")
        return self._inner.list_signals(run_id)

    def fire_due_timers(self, limit: int = 100) -> list[Timer]:
        self._need(Promise.TIMERS, "fire_due_timers()")
        return self._inner.fire_due_timers(limit)

    def list_timers(self, run_id: str) -> list[Timer]:
        self._need(Promise.TIMERS, "list_timers()")
        return self._inner.list_timers(run_id)

    # -- unit of work -----------------------------------------------------------
    def transaction(self) -> AbstractContextManager[Transaction]:
        self._need(Promise.UNIT_OF_WORK, "transaction()")
        return self._inner.transaction()

    def lock_run(self, run_id: str) -> Run | None:
        self._need(Promise.UNIT_OF_WORK, "lock_run()")
        return self._inner.lock_run(run_id)


class WithholdingDatabase:
    def __init__(self, withheld: frozenset[Promise], tokens: bool) -> None:
        self._inner = MemoryDatabase()
        self._withheld = withheld
        self._tokens: dict[tuple[str, str, str, int], str] | None = {} if tokens else None
        self.label = f"withholding {self._inner.label}"

    def open(self, tenant_id: str = "default", *, clock: ClockMode = ClockMode.TEST,
             migrations: Sequence[MigrationSpec] | None = None,
             statement_hook: StatementHook | None = None) -> WithholdingStore:
        inner_tenant = "shared" if Promise.TENANCY in self._withheld else tenant_id
        inner = self._inner.open(inner_tenant, clock=clock, migrations=migrations, statement_hook=statement_hook)
        return WithholdingStore(inner, self._withheld, self._tokens, tenant_id)

    def kill_session(self, store: Storage) -> None:
        raise NotImplementedError("the withholding store does not declare kill_session")

    def drop(self) -> None:
        self._inner.drop()


class WithholdingBackend:
    """The reference engine declaring (and keeping) every promise but ``withhold``."""

    def __init__(self, withhold: Iterable[Promise] = (), *, test_clock: bool = True, tokens: bool = False) -> None:
        self.withheld = frozenset(withhold)
        self.tokens = tokens
        base = MemoryBackend.capabilities
        supported = [c for c in base.supported if test_clock or c is not Capability.TEST_CLOCK]
        self.capabilities = Capabilities.of(*supported, clock_resolution_us=base.clock_resolution_us,
                                            withhold=self.withheld)
        parts = [p.value for p in sorted(self.withheld)] + ([] if test_clock else ["test_clock"])
        self.name = "withholding" if not parts else "without-" + "+".join(parts)
        if tokens:
            self.name = "token-fenced" if not parts else f"token-fenced-{self.name}"

    def describe(self) -> str:
        return f"reference engine keeping all promises but: {', '.join(sorted(p.value for p in self.withheld)) or '-'}"

    def provision(self) -> WithholdingDatabase:
        return WithholdingDatabase(self.withheld, self.tokens)

    def close(self) -> None:
        pass


def no_timers() -> WithholdingBackend:
    return WithholdingBackend([Promise.TIMERS])


def no_leases() -> WithholdingBackend:
    return WithholdingBackend([Promise.LEASES])


def no_wake_on_input() -> WithholdingBackend:
    return WithholdingBackend([Promise.WAKE_ON_INPUT])


def no_test_clock() -> WithholdingBackend:
    return WithholdingBackend(test_clock=False)


def token_fenced() -> WithholdingBackend:
    return WithholdingBackend(tokens=True)


def from_env() -> WithholdingBackend:
    """``KIT_WITHHOLD=timers,leases`` (promise values, or ``test_clock``) names what to withhold."""
    import os

    names = [n.strip() for n in os.environ.get("KIT_WITHHOLD", "").split(",") if n.strip()]
    promises = [Promise(n) for n in names if n != "test_clock"]
    return WithholdingBackend(promises, test_clock="test_clock" not in names,
                              tokens=os.environ.get("KIT_TOKENS") == "1")
