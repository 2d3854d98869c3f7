"""A throw-away PostgreSQL database for the stand-alone reproductions (created and dropped here)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

SERVER = os.environ.get("FINDINGS_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")


@contextmanager
def throwaway_database() -> Iterator[str]:
    """The conninfo of a fresh database, dropped afterwards."""
    name = f"kit_finding_{secrets.token_hex(4)}"
    with psycopg.connect(SERVER, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield psycopg.conninfo.make_conninfo(SERVER, dbname=name)
    finally:
        with psycopg.connect(SERVER, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
