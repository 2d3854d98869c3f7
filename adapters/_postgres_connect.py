"""How the PostgreSQL adapter reaches a server: URLs, session settings, probing, containers.

Every session the kit opens is autocommit (the store issues BEGIN/COMMIT
itself), names itself ``kit:<schema>`` (so the kit only ever ends its own
sessions), works in exactly one schema, has bounded lock waits, and hands
JSON back as text.
"""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg
from psycopg.types.string import StrDumperUnknown, TextLoader

from adapters._server import NAMESPACE_PREFIX
from kit.contract.errors import BackendUnavailable, ConfigurationError
from kit.discovery import parse_url

__all__ = [
    "APP_PREFIX",
    "CONNECT_TIMEOUT_S",
    "CONTAINER_IMAGE",
    "DRIVERS",
    "EXAMPLE",
    "KILL_TIMEOUT_MS",
    "LOCK_TIMEOUT_MS",
    "MIN_SERVER_VERSION",
    "STATEMENT_TIMEOUT_MS",
    "application_name",
    "check_namespace",
    "connect_params",
    "first_line",
    "open_connection",
    "probe",
    "start_container",
]

DRIVERS = ("postgresql",)
EXAMPLE = "postgresql+psycopg://user:password@host:5432/dbname"
APP_PREFIX = "kit:"
CONTAINER_IMAGE = "postgres:15-alpine"
MIN_SERVER_VERSION = 140000
"""14: EXTRACT(EPOCH ...) returns exact numeric, pg_terminate_backend takes a timeout."""

LOCK_TIMEOUT_MS = 5_000
"""How long any statement waits for a row, table or advisory lock before failing."""
STATEMENT_TIMEOUT_MS = 60_000
"""How long any one statement may run; generous, only there so nothing hangs forever."""
KILL_TIMEOUT_MS = 10_000
"""How long ``kill_session`` waits for the killed backend to be gone."""
CONNECT_TIMEOUT_S = 5


def connect_params(url: str) -> dict[str, Any]:
    """libpq keyword parameters for a SQLAlchemy ``postgresql[+driver]://`` URL.

    Query parameters pass through (``?host=/var/run/postgresql`` selects a Unix
    socket, ``?sslmode=require`` ...).
    """
    parsed = parse_url(url, "postgres", DRIVERS, EXAMPLE)
    params: dict[str, Any] = {}
    if parsed.host:
        params["host"] = parsed.host
    if parsed.port:
        params["port"] = parsed.port
    if parsed.username:
        params["user"] = parsed.username
    if parsed.password is not None:
        params["password"] = parsed.password
    if parsed.database:
        params["dbname"] = parsed.database
    for key, value in parsed.query.items():
        params[key] = value[-1] if isinstance(value, tuple) else value
    params.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
    return params


def application_name(namespace: str | None) -> str:
    """How the kit's sessions name themselves (``kit:<schema>``, ``kit:admin``, ``kit:probe``)."""
    return f"{APP_PREFIX}{namespace or 'admin'}"


def open_connection(params: dict[str, Any], namespace: str | None) -> psycopg.Connection[Any]:
    """An autocommit connection: the store issues BEGIN/COMMIT itself (its own depth
    tracking, never psycopg's savepoint-nesting ``transaction()``)."""
    settings = {
        "lock_timeout": str(LOCK_TIMEOUT_MS),
        "statement_timeout": str(STATEMENT_TIMEOUT_MS),
        "TimeZone": "UTC",
    }
    if namespace is not None:
        check_namespace(namespace)
        # Only the kit's schema: unqualified names can never resolve into public.
        settings["search_path"] = namespace
    options = " ".join(f"-c {key}={value}" for key, value in settings.items())
    kwargs = dict(params)
    if kwargs.get("options"):
        options = f"{kwargs['options']} {options}"
    kwargs.update(
        options=options,
        application_name=application_name(namespace),
        client_encoding="UTF8",
        autocommit=True,
    )
    conn: psycopg.Connection[Any] = psycopg.connect(**kwargs)
    # jsonb comes back as its text: rows.py parses JSON itself, and refuses driver-parsed values
    # (which cannot tell the JSON string "x" from the text x).
    conn.adapters.register_loader("json", TextLoader)
    conn.adapters.register_loader("jsonb", TextLoader)
    # str parameters go untyped ('unknown'): PostgreSQL then takes JSON text into jsonb
    # columns and compares keys with the column's COLLATE "C".
    conn.adapters.register_dumper(str, StrDumperUnknown)
    return conn


def check_namespace(namespace: str) -> None:
    rest = namespace.removeprefix(NAMESPACE_PREFIX)
    if rest == namespace or not rest or not all(c in "0123456789abcdef" for c in rest):
        raise ConfigurationError(f"{namespace!r} is not a kit schema name (kit_<hex>)")


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:200]



def probe(url: str) -> str:
    """Connect once; the server's version, or an error naming what is wrong with it."""
    params = {**connect_params(url), "application_name": application_name("probe")}
    with psycopg.connect(**params, autocommit=True) as conn:
        row = conn.execute(
            "SELECT current_setting('server_version_num')::int, current_setting('server_version'), "
            "current_setting('server_encoding')"
        ).fetchone()
    assert row is not None
    number, version, encoding = int(row[0]), str(row[1]).split()[0], str(row[2])
    if number < MIN_SERVER_VERSION:
        raise ConfigurationError(f"PostgreSQL {version} is too old: the kit needs 14 or newer")
    if encoding.upper() not in ("UTF8", "UTF-8"):
        raise ConfigurationError(
            f"the database's encoding is {encoding}: point the URL at a UTF8 database "
            "(CREATE DATABASE ... ENCODING 'UTF8')"
        )
    return f"PostgreSQL {version}"


def start_container() -> tuple[str, Any]:
    """A throw-away PostgreSQL container (only called when a Docker engine answers)."""
    try:  # testcontainers >= 4.10 moved the module (pitfall 24); the old path warns
        from testcontainers.community.postgres import PostgresContainer
    except ImportError:
        from testcontainers.postgres import PostgresContainer
    container: Any = None
    try:
        # The constructor already talks to Docker (DockerException without an engine).
        container = PostgresContainer(CONTAINER_IMAGE, driver="psycopg")
        container.start()
        return str(container.get_connection_url()), container
    except Exception as exc:  # noqa: BLE001 - whatever Docker says, the backend is unavailable
        if container is not None:
            with contextlib.suppress(Exception):  # it may never have started
                container.stop()
        raise BackendUnavailable(
            "postgres",
            f"testcontainers could not start {CONTAINER_IMAGE} ({first_line(exc)})",
            "Check that the Docker engine can pull and run images, or give --url / KIT_POSTGRES_URL",
        ) from None
