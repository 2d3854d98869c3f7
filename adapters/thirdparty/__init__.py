"""Adapters for third-party stores: each calls the library's own storage code, never a copy of it.

* :mod:`adapters.thirdparty.procrastinate` -- procrastinate's PostgreSQL job queue, through the
  queue profile (``pip install 'durable-storage-kit[procrastinate]'``).
"""
