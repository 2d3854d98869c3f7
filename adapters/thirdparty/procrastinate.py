"""procrastinate (the PostgreSQL job queue) through the kit's queue profile.

Every operation calls procrastinate's own code: ``App.configure_task(...).defer_async``
to enqueue, its ``JobManager`` (``fetch_job``, ``finish_job``, ``retry_job``,
``update_heartbeat``, ``get_stalled_jobs``, ``list_jobs_async``...) over its
``PsycopgConnector``, its ``RetryStrategy`` to decide retries, and its
``SchemaManager`` to apply its schema. The adapter only translates names:

* a kit job's payload is the job's kwargs ``{"payload": ...}``; its key is the
  ``queueing_lock``, its serial lock the ``lock``; ``run_after`` is ``scheduled_at``;
* a kit worker is a registered procrastinate worker (``register_worker``), its
  heartbeat procrastinate's per-worker heartbeat;
* ``recover(stalled_after)`` is procrastinate's documented recipe for stalled jobs:
  ``get_stalled_jobs(seconds_since_heartbeat=...)`` then ``retry_job`` for each;
* the kit's ``max_attempts`` (runs in all) is ``RetryStrategy(max_attempts=n - 1)``, whose
  ``max_attempts`` counts retries ("the maximum number of attempts the job should be retried").

It runs against a kit-created throw-away database (``kit_<hex>``) on the server
that discovery finds; every provisioned queue is a kit-owned schema in it with
procrastinate's schema applied. Factory: ``adapters.thirdparty.procrastinate:discover``.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from adapters._postgres_connect import (
    DRIVERS,
    EXAMPLE,
    application_name,
    check_namespace,
    connect_params,
    probe,
)
from adapters._server import NAMESPACE_PREFIX
from kit.contract.entities import JSON
from kit.contract.errors import BackendUnavailable, ClockModeError, InvalidArgument, StorageError
from kit.contract.outcomes import Outcome
from kit.discovery import ServerHandle
from kit.discovery import discover as discover_server
from kit.queue import (
    DEFAULT_POLICY,
    Enqueued,
    Job,
    JobClaim,
    JobStatus,
    QueuePolicy,
    QueuePromise,
    QueuePromises,
)

try:
    import procrastinate
    import psycopg
    from procrastinate import exceptions as p_exceptions
    from procrastinate import jobs as p_jobs
    from procrastinate import retry as p_retry
except ModuleNotFoundError as _missing:  # pragma: no cover - exercised only without the extra
    _IMPORT_ERROR: ModuleNotFoundError | None = _missing
else:
    _IMPORT_ERROR = None

__all__ = ["PROMISES", "ProcrastinateBackend", "ProcrastinateDatabase", "ProcrastinateStore", "discover"]

LOCAL_DEFAULTS = (
    "postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
    "postgresql+psycopg://postgres@/postgres?host=/var/run/postgresql",
)

PROMISES = QueuePromises.of(
    QueuePromise.DEDUP_KEYS,  # queueing_lock: unique among 'todo' jobs (procrastinate_jobs_queueing_lock_idx_v1)
    QueuePromise.RETRY_BACKOFF,  # RetryStrategy(wait=...) -> retry_job(retry_at=...) -> scheduled_at
    QueuePromise.RETRY_LIMIT,  # RetryStrategy(max_attempts=...)
    QueuePromise.DELAYED_JOBS,  # schedule_in / scheduled_at, compared with now() by fetch_job
    QueuePromise.STALLED_RECOVERY,  # v3 worker heartbeats + get_stalled_jobs + retry_job
    QueuePromise.SERIAL_LOCKS,  # lock: unique among 'doing' jobs, fetch_job skips locked ones
    QueuePromise.CONCURRENT_CONNECTIONS,  # fetch_job is FOR UPDATE SKIP LOCKED
)
"""What procrastinate promises. Not promised: ``fenced_acks`` (finish_job and retry_job take only the
job id: procrastinate does not check which worker finishes a job, and finish_job accepts a job in
'todo'), and ``test_clock`` (every procedure reads the database's now())."""

_STATUS = {
    "todo": JobStatus.QUEUED,
    "doing": JobStatus.RUNNING,
    "succeeded": JobStatus.SUCCEEDED,
    "failed": JobStatus.FAILED,
    "cancelled": JobStatus.FAILED,
    "aborted": JobStatus.FAILED,
}
_PROCRASTINATE_STATUS = {
    JobStatus.QUEUED: "todo",
    JobStatus.RUNNING: "doing",
    JobStatus.SUCCEEDED: "succeeded",
    JobStatus.FAILED: "failed",
}
_MARK = "durable-storage-kit: kit-owned throw-away schema, dropped by the kit"
_EMPTY = ";".join(f"DELETE FROM {table}" for table in (
    "procrastinate_events", "procrastinate_periodic_defers", "procrastinate_jobs", "procrastinate_workers"))


def _fault(call: str, exc: Exception) -> StorageError:
    """procrastinate refused a write for a reason other than the job's state: a genuine fault."""
    cause = str(exc.__cause__ or exc.__context__ or exc).strip().splitlines()
    constraint = getattr(exc, "constraint_name", None)
    detail = f" on {constraint}" if constraint else ""
    return StorageError(f"procrastinate's {call} raised {type(exc).__name__}{detail}: {cause[0] if cause else ''}")


def _require_procrastinate() -> None:
    if _IMPORT_ERROR is not None:
        raise BackendUnavailable(
            "procrastinate", f"the procrastinate package is not installed ({_IMPORT_ERROR.name})",
            "Install it with: pip install 'durable-storage-kit[procrastinate]'",
        )


class ProcrastinateStore:
    """One store: its own event loop, connector (a one-connection pool) and procrastinate App."""

    def __init__(self, database: ProcrastinateDatabase, policy: QueuePolicy) -> None:
        seconds = policy.backoff.total_seconds()
        if seconds != int(seconds) or seconds < 0:
            raise InvalidArgument(f"procrastinate's RetryStrategy waits whole seconds: give a backoff of whole "
                                  f"seconds, not {policy.backoff}")
        self._database = database
        self.policy = policy
        self._retry = p_retry.RetryStrategy(max_attempts=max(policy.max_attempts - 1, 0), wait=int(seconds))
        self._runner = asyncio.Runner()
        self._connector = procrastinate.PsycopgConnector(
            conninfo="", kwargs=database.connection_kwargs(), min_size=1, max_size=1,
        )
        self._app = procrastinate.App(connector=self._connector)
        self._run(self._connector.open_async())
        self._manager = self._app.job_manager

    def _run(self, coroutine: Any) -> Any:
        return self._runner.run(coroutine)

    def close(self) -> None:
        try:
            self._run(self._connector.close_async())
        finally:
            self._runner.close()

    def now(self) -> datetime:
        row = self._run(self._connector.execute_query_one_async("SELECT now() AS now"))
        return row["now"]  # type: ignore[no-any-return]

    def advance_clock(self, by: timedelta) -> datetime:
        raise ClockModeError("procrastinate runs on the database clock (now()): it has no test clock to advance")

    # -- jobs ---------------------------------------------------------------
    def enqueue(self, queue: str, task: str, payload: JSON = None, *, key: str | None = None,
                lock: str | None = None, delay: timedelta | None = None) -> Enqueued:
        options: dict[str, Any] = {"queue": queue, "queueing_lock": key, "lock": lock}
        if delay is not None:
            options["schedule_in"] = {"seconds": delay.total_seconds()}
        deferrer = self._app.configure_task(task, **options)
        try:
            job_id = self._run(deferrer.defer_async(payload=payload))
        except p_exceptions.AlreadyEnqueued:
            waiting = self._run(self._manager.list_jobs_async(queueing_lock=key, status="todo"))
            if not waiting:  # the waiting job was claimed in between: enqueue anew
                return self.enqueue(queue, task, payload, key=key, lock=lock, delay=delay)
            return Enqueued(self._job(waiting[0]), created=False)
        job = self.get(str(job_id))
        assert job is not None
        return Enqueued(job, created=True)

    def claim(self, worker: str, queues: Sequence[str] | None = None) -> JobClaim | None:
        worker_id = self._database.worker_id(worker, self)
        job = self._run(self._manager.fetch_job(list(queues) if queues is not None else None, worker_id))
        if job is None:
            return None
        return JobClaim(str(job.id), worker, job.queue, job.task_name, job.task_kwargs.get("payload"),
                        job.attempts + 1, str(worker_id))

    def heartbeat(self, claim: JobClaim) -> Outcome:
        # procrastinate's heartbeat is per worker and says nothing about the job.
        self._run(self._manager.update_heartbeat(int(claim.token)))
        return Outcome.RENEWED

    def complete(self, claim: JobClaim, result: JSON = None) -> Outcome:
        job = self._claimed_job(claim)
        try:
            self._run(self._manager.finish_job(job, p_jobs.Status.SUCCEEDED, delete_job=False))
        except p_exceptions.UniqueViolation as exc:
            raise _fault("finish_job", exc) from exc
        except p_exceptions.ConnectorException:
            return self._refusal(claim)
        return Outcome.COMPLETED

    def fail(self, claim: JobClaim, error: JSON = None, retry: bool = True) -> Outcome:
        job = self._claimed_job(claim)
        decision = None
        if retry and self.policy.max_attempts > 1:
            decision = self._retry.get_retry_decision(exception=RuntimeError(str(error)), job=job)
        try:
            if decision is not None:  # what procrastinate's worker does (Worker._persist_job_status)
                self._run(self._manager.retry_job(job, retry_at=decision.retry_at, lock=decision.lock,
                                                  priority=decision.priority, queue=decision.queue))
                return Outcome.RETRY_SCHEDULED
            self._run(self._manager.finish_job(job, p_jobs.Status.FAILED, delete_job=False))
        except p_exceptions.UniqueViolation as exc:
            raise _fault("retry_job" if decision is not None else "finish_job", exc) from exc
        except p_exceptions.ConnectorException:
            return self._refusal(claim)
        return Outcome.FAILED

    def recover(self, stalled_after: timedelta) -> list[str]:
        stalled = self._run(self._manager.get_stalled_jobs(seconds_since_heartbeat=stalled_after.total_seconds()))
        for job in stalled:  # procrastinate's documented recipe for stalled jobs
            try:
                self._run(self._manager.retry_job(job))
            except p_exceptions.ConnectorException as exc:
                raise _fault("retry_job (of a stalled job)", exc) from exc
        return [str(job.id) for job in stalled]

    def get(self, job_id: str) -> Job | None:
        if not job_id.isdigit():
            return None
        found = self._run(self._manager.list_jobs_async(id=int(job_id)))
        return self._job(found[0]) if found else None

    def list(self, queue: str | None = None, status: JobStatus | None = None) -> list[Job]:
        found = self._run(self._manager.list_jobs_async(
            queue=queue, status=_PROCRASTINATE_STATUS[status] if status is not None else None))
        return [self._job(job) for job in found]

    # -- translation ----------------------------------------------------------
    def _claimed_job(self, claim: JobClaim) -> p_jobs.Job:
        """The job as the claiming worker fetched it (what procrastinate's worker passes back)."""
        return p_jobs.Job(id=int(claim.job_id), queue=claim.queue, lock=None, queueing_lock=None,
                          task_name=claim.task, task_kwargs={"payload": claim.payload},
                          attempts=claim.attempt - 1, worker_id=int(claim.token))

    def _refusal(self, claim: JobClaim) -> Outcome:
        """procrastinate raised (the job is not in a state it accepts): say why, from its state."""
        job = self.get(claim.job_id)
        if job is None:
            return Outcome.NOT_FOUND
        return Outcome.TERMINAL if job.status.terminal else Outcome.CLAIM_LOST

    def _job(self, job: p_jobs.Job) -> Job:
        return Job(
            job_id=str(job.id), queue=job.queue, task=job.task_name, payload=job.task_kwargs.get("payload"),
            status=_STATUS[str(job.status)], attempts=job.attempts, key=job.queueing_lock, lock=job.lock,
            run_after=job.scheduled_at, worker=self._database.worker_name(job.worker_id),
        )


class ProcrastinateDatabase:
    """One kit-owned schema in the run's throw-away database, with procrastinate's schema applied."""

    def __init__(self, backend: ProcrastinateBackend, schema: str) -> None:
        self._backend = backend
        self.schema = schema
        self.label = f"procrastinate schema {schema} in database {backend.database_name}"
        self._lock = threading.Lock()
        self._workers: dict[str, int] = {}

    def connection_kwargs(self) -> dict[str, Any]:
        return self._backend.connection_kwargs(self.schema)

    def open(self, policy: QueuePolicy = DEFAULT_POLICY) -> ProcrastinateStore:
        return ProcrastinateStore(self, policy)

    def worker_id(self, name: str, store: ProcrastinateStore) -> int:
        """The procrastinate worker registered for kit worker ``name`` (registered on first use)."""
        with self._lock:
            if name not in self._workers:
                self._workers[name] = int(store._run(store._manager.register_worker()))
            return self._workers[name]

    def worker_name(self, worker_id: int | None) -> str | None:
        if worker_id is None:
            return None
        with self._lock:
            for name, known in self._workers.items():
                if known == worker_id:
                    return name
        return str(worker_id)

    def reset(self) -> None:
        """Empty procrastinate's tables (its schema stays applied): one schema serves many examples."""
        with self._lock:
            self._workers.clear()
        self._backend.admin(_EMPTY, self.schema)

    def drop(self) -> None:
        self._backend.drop_schema(self.schema)


class ProcrastinateBackend:
    """procrastinate on one PostgreSQL server, in a throw-away database the kit creates and drops."""

    name = "procrastinate"
    queue_promises = PROMISES

    def __init__(self, handle: ServerHandle) -> None:
        _require_procrastinate()
        self.handle = handle
        self._params = connect_params(handle.url)
        self.database_name = f"{NAMESPACE_PREFIX}{secrets.token_hex(6)}"
        self._created = False
        self._lock = threading.Lock()
        self._count = itertools.count(1)

    def describe(self) -> str:
        return f"procrastinate {procrastinate.__version__} on {self.handle}; psycopg {psycopg.__version__}"

    def connection_kwargs(self, schema: str | None) -> dict[str, Any]:
        params = {**self._params, "dbname": self.database_name}
        settings = {"TimeZone": "UTC", "lock_timeout": "5000", "statement_timeout": "60000"}
        if schema is not None:
            check_namespace(schema)
            settings["search_path"] = schema
        params["options"] = " ".join(f"-c {k}={v}" for k, v in settings.items())
        params["application_name"] = application_name(schema)
        return params

    def _ensure_database(self) -> None:
        with self._lock:
            if self._created:
                return
            with psycopg.connect(**{**self._params, "application_name": application_name(None)},
                                 autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{self.database_name}"')
                conn.execute(f"COMMENT ON DATABASE \"{self.database_name}\" IS '{_MARK}'")
            self._created = True

    def admin(self, sql: str, schema: str | None = None) -> None:
        with psycopg.connect(**self.connection_kwargs(schema), autocommit=True) as conn:
            conn.execute(sql)

    def provision(self) -> ProcrastinateDatabase:
        self._ensure_database()
        schema = f"{NAMESPACE_PREFIX}{secrets.token_hex(6)}"
        self.admin(f'CREATE SCHEMA "{schema}"; COMMENT ON SCHEMA "{schema}" IS \'{_MARK}\'')
        connector = procrastinate.SyncPsycopgConnector(
            conninfo="", kwargs=self.connection_kwargs(schema), min_size=1, max_size=1)
        connector.open()
        try:
            procrastinate.schema.SchemaManager(connector).apply_schema()  # procrastinate's own schema
        finally:
            connector.close()
        return ProcrastinateDatabase(self, schema)

    def drop_schema(self, schema: str) -> None:
        check_namespace(schema)
        self._terminate(f"application_name = '{application_name(schema)}'")
        self.admin(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    def _terminate(self, where: str) -> None:
        with psycopg.connect(**{**self._params, "application_name": application_name(None)},
                             autocommit=True) as conn:
            conn.execute(  # only the kit's own sessions on the kit's database
                "SELECT pg_terminate_backend(pid, 10000) FROM pg_catalog.pg_stat_activity "
                f"WHERE datname = '{self.database_name}' AND pid <> pg_backend_pid() AND {where}"
            )

    def close(self) -> None:
        with self._lock:
            if not self._created:
                return
            self._terminate("starts_with(application_name, 'kit:')")
            with psycopg.connect(**{**self._params, "application_name": application_name(None)},
                                 autocommit=True) as conn:
                row = conn.execute("SELECT shobj_description(oid, 'pg_database') FROM pg_database "
                                   "WHERE datname = %s", (self.database_name,)).fetchone()
                if row is not None and row[0] == _MARK:  # never drop a database the kit did not create
                    conn.execute(f'DROP DATABASE "{self.database_name}"')
            self._created = False


def discover(url: str | None = None) -> ProcrastinateBackend:
    """procrastinate on the first PostgreSQL server found (``url``, ``KIT_POSTGRES_URL``, then the
    local defaults), in a throw-away database the kit creates and drops."""
    _require_procrastinate()
    handle, _container = discover_server(
        "postgres", url, drivers=DRIVERS, example=EXAMPLE, local=LOCAL_DEFAULTS, probe=probe,
    )
    return ProcrastinateBackend(handle)
