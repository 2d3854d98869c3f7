"""procrastinate: a worker's retry re-queues a job that has already failed for good.

Stand-alone: only procrastinate's public API (App, JobManager) on a throw-away PostgreSQL
database. Run: python docs/findings/procrastinate_retry_revives_failed_job.py

The worker persists a failure that asks for a retry with ``JobManager.retry_job`` (see
``Worker._persist_job_status``). That calls ``procrastinate_retry_job_v2``, which accepts a job
in 'doing' *or 'failed'* (the same procedure serves the manual "retry a failed job" action), and
nothing tells it which worker is asking. So a worker that lost its job (stalled, recovered by the
documented ``get_stalled_jobs`` + ``retry_job`` recipe, re-run by another worker that failed it for
good) and then finishes its own run with a retryable error brings the failed job back to 'todo':
it runs again although its failure was final. The kit's queue machine found the shortest form:
one claim, ``fail(retry=False)`` then ``fail(retry=True)`` (a repeated acknowledgement), and the
failed job is queued again. Exit status 1 when the weakness reproduces.
"""

from __future__ import annotations

import asyncio
import sys

import procrastinate
from procrastinate.jobs import Status

from _throwaway import throwaway_database  # type: ignore[import-not-found]


async def main(conninfo: str) -> str:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo))
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        manager = app.job_manager
        strategy = procrastinate.RetryStrategy(max_attempts=5)
        job_id = await app.configure_task("import-batch").defer_async(batch=7)

        worker_a = await manager.register_worker()
        job_seen_by_a = await manager.fetch_job(queues=None, worker_id=worker_a)
        assert job_seen_by_a is not None and job_seen_by_a.id == job_id
        # Worker A stalls (a long pause, a lost network): the documented recipe retries its job.
        await asyncio.sleep(0.2)
        for stalled in await manager.get_stalled_jobs(seconds_since_heartbeat=0.1):
            await manager.retry_job(stalled)
        # Worker B runs the job again; it fails with a non-retryable error: failed for good.
        worker_b = await manager.register_worker()
        job_seen_by_b = await manager.fetch_job(queues=None, worker_id=worker_b)
        assert job_seen_by_b is not None and job_seen_by_b.id == job_id
        await manager.finish_job(job_seen_by_b, Status.FAILED, delete_job=False)
        [after_b] = await manager.list_jobs_async(id=job_id)
        print(f"after worker B's final failure the job is {after_b.status!r}")
        # Worker A wakes up; its run ends with a retryable error, and it persists it as its worker does.
        decision = strategy.get_retry_decision(exception=RuntimeError("timeout"), job=job_seen_by_a)
        assert decision is not None
        await manager.retry_job(job_seen_by_a, retry_at=decision.retry_at)
        [job] = await manager.list_jobs_async(id=job_id)
        print(f"after worker A's late retry the job is {job.status!r}, attempts {job.attempts}")
        return str(job.status)


if __name__ == "__main__":
    with throwaway_database() as dsn:
        status = asyncio.run(main(dsn))
    if status == "todo":
        print("REPRODUCED: a job that failed for good is queued to run again")
        sys.exit(1)
    print("not reproduced")
