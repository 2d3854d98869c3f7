"""Adapters for storage layers the kit did not write.

Each one calls the library's own storage code and never re-implements it;
what the library does not promise is declared, with a reason, not faked.
Each is installed through an extra of the same name (``pip install -e '.[dbos]'``).

* :mod:`adapters.thirdparty.procrastinate` -- procrastinate's PostgreSQL job queue, through the
  queue profile (``pip install 'durable-storage-kit[procrastinate]'``).
"""
