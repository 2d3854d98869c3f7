"""procrastinate: a failing job whose queueing lock a newer job took cannot be retried.

Stand-alone: only procrastinate's public API (an App, a task, defer, a real worker) on a
throw-away PostgreSQL database. Run: python docs/findings/procrastinate_retry_blocked_by_queueing_lock.py

A queueing lock keeps two jobs from *waiting* at once; a running job does not hold it. So
while job 1 runs, job 2 with the same queueing lock may be deferred (here by job 1 itself, as
a periodic or self-rescheduling task does). When job 1 then fails and its retry strategy asks
for a retry, the worker's ``retry_job`` moves job 1 back to 'todo' and hits the unique index
``procrastinate_jobs_queueing_lock_idx_v1``: the retry raises ``UniqueViolation``, and job 1
stays 'doing' with nobody running it. Its worker is alive and heartbeats, so it is not even
a stalled job; once it is, the documented recovery (``retry_job`` of each stalled job) raises
the same error. Exit status 1 when the weakness reproduces.
"""

from __future__ import annotations

import asyncio
import sys

import procrastinate

from _throwaway import throwaway_database  # type: ignore[import-not-found]


async def main(conninfo: str) -> str:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo))

    @app.task(name="report", queueing_lock="nightly", retry=procrastinate.RetryStrategy(max_attempts=3))
    async def report(n: int) -> None:
        if n == 1:
            await report.configure(queueing_lock="nightly").defer_async(n=2)  # the next run is queued
            raise RuntimeError("flaky: please retry")

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        job_id = await report.defer_async(n=1)
        try:
            await app.run_worker_async(queues=["default"], wait=False, concurrency=1)
        except Exception as exc:  # noqa: BLE001 - whatever the worker lets out is part of the finding
            print(f"the worker stopped with {type(exc).__name__}: {exc}")
        [job] = await app.job_manager.list_jobs_async(id=job_id)
        print(f"job {job_id} (failed, retry asked) is now {job.status!r}, attempts {job.attempts}")
        return str(job.status)


if __name__ == "__main__":
    with throwaway_database() as dsn:
        status = asyncio.run(main(dsn))
    if status == "doing":
        print("REPRODUCED: the job is stuck in 'doing' with no worker running it")
        sys.exit(1)
    print("not reproduced")
