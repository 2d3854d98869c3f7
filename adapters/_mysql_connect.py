"""How the MySQL / MariaDB adapter reaches a server: URLs, sessions, probes, testcontainers.

Every connection the adapter makes comes from :func:`connect`, so every session
has the same settings: autocommit (the store issues its own START TRANSACTION /
COMMIT, so no read leaves an implicit transaction holding locks), matched-row
counts (``CLIENT.FOUND_ROWS``), READ COMMITTED, UTC, a strict SQL mode, and
bounded lock waits.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import weakref
from typing import Any

import pymysql
from pymysql.constants import CLIENT, FIELD_TYPE
from pymysql.converters import conversions

from kit.contract.errors import BackendUnavailable, ConfigurationError
from kit.discovery import parse_url

__all__ = [
    "DEFAULT_IMAGE",
    "DRIVERS",
    "EXAMPLE",
    "LOCAL_URLS",
    "LOCK_WAIT_TIMEOUT_S",
    "METADATA_LOCK_WAIT_S",
    "SQL_MODE",
    "connect",
    "connect_params",
    "error_code",
    "probe",
    "server_version",
    "session_id",
    "start_container",
]

LOCK_WAIT_TIMEOUT_S = 5
"""``innodb_lock_wait_timeout`` of every session: a write blocked this long on a row lock fails (1205)."""
METADATA_LOCK_WAIT_S = 60
"""``lock_wait_timeout`` (metadata locks: DDL, DROP DATABASE), so schema changes never wait a year."""

SQL_MODE = "STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION"
"""Strict (an over-long value is an error, never truncated) and valid on MySQL 8 and MariaDB alike.

Set explicitly because the defaults differ (MariaDB's includes NO_AUTO_CREATE_USER, which MySQL 8
rejects) and a server may add NO_BACKSLASH_ESCAPES or ANSI_QUOTES, which PyMySQL's escaping and
the store's SQL do not support.
"""

WRITE_ISOLATION = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"
"""The portable statement: the variable is transaction_isolation on MySQL 8, tx_isolation on MariaDB < 11.1."""

DRIVERS = ("mysql", "mariadb")
EXAMPLE = "mysql+pymysql://user:password@127.0.0.1:3306/"
LOCAL_URLS = (
    "mysql+pymysql://root@127.0.0.1:3306/",
    "mysql+pymysql://root@localhost/?unix_socket=/run/mysqld/mysqld.sock",
    "mysql+pymysql://root@localhost/?unix_socket=/tmp/mysql.sock",
)
"""Local defaults tried in order: the default TCP port, then the usual socket paths (Debian, macOS)."""
DEFAULT_IMAGE = "mysql:8.0"
"""The testcontainers image; ``KIT_MYSQL_IMAGE`` overrides it (e.g. ``mariadb:10.11``)."""


def error_code(error: BaseException) -> int | None:
    """The server (or client) error number of a PyMySQL error, if it has one."""
    args = getattr(error, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def _text(value: Any) -> Any:
    """VARBINARY / BINARY values are UTF-8 text in this schema: hand them back as ``str``."""
    return value.decode("utf-8") if isinstance(value, bytes | bytearray) else value


# VARBINARY arrives as VAR_STRING with the binary charset, which PyMySQL leaves as bytes;
# BLOB types (the definition body) keep their bytes.
_CONVERSIONS: dict[Any, Any] = {**conversions, FIELD_TYPE.VAR_STRING: _text, FIELD_TYPE.STRING: _text}

_URL_PATHS = ("unix_socket", "ssl_ca", "ssl_cert", "ssl_key")
_URL_FLAGS = ("ssl_verify_cert", "ssl_verify_identity")


def _truthy(value: object) -> bool:
    return str(value).lower() in ("1", "true", "yes", "on")


def connect_params(url: str) -> dict[str, Any]:
    """PyMySQL keyword arguments (host/port or unix_socket, user, password, TLS files) from a SQLAlchemy URL.

    Understood query options: ``unix_socket``, ``ssl_ca``, ``ssl_cert``, ``ssl_key`` (paths),
    ``ssl_verify_cert``, ``ssl_verify_identity`` (true/false) and ``ssl=true`` (TLS without
    certificate verification, for throw-away test servers); ``charset`` is ignored (always utf8mb4).
    """
    parsed = parse_url(url, "mysql", DRIVERS, EXAMPLE)
    query = {k: (v[-1] if isinstance(v, tuple) else v) for k, v in parsed.query.items()}
    unknown = sorted(set(query) - {*_URL_PATHS, *_URL_FLAGS, "ssl", "charset"})
    if unknown:
        raise ConfigurationError(
            f"unsupported MySQL URL options {unknown}: the kit understands "
            f"{', '.join((*_URL_PATHS, *_URL_FLAGS, 'ssl'))} (write the URL like {EXAMPLE}?ssl_ca=/path/ca.pem)"
        )
    params: dict[str, Any] = {"user": parsed.username or "root", "password": parsed.password or ""}
    params.update({k: query[k] for k in _URL_PATHS[1:] if query.get(k)})
    for flag in _URL_FLAGS:
        if flag in query:
            params[flag] = _truthy(query[flag])
    if _truthy(query.get("ssl", "")) and not any(k in params for k in _URL_PATHS[1:]):
        params["ssl"] = {"verify_mode": False}  # TLS, certificate not verified: throw-away servers only
    if query.get("unix_socket"):
        params["unix_socket"] = query["unix_socket"]
        params["host"] = parsed.host or "localhost"
    else:
        params["host"] = parsed.host or "127.0.0.1"
        params["port"] = int(parsed.port or 3306)
    return params


_SESSION_SETUP = (
    f"{WRITE_ISOLATION}; "
    f"SET SESSION time_zone = '+00:00', SESSION sql_mode = '{SQL_MODE}', "
    f"SESSION innodb_lock_wait_timeout = {LOCK_WAIT_TIMEOUT_S}, SESSION lock_wait_timeout = {METADATA_LOCK_WAIT_S}; "
    "SELECT CONNECTION_ID()"
)
"""Every session's settings and its id, as one multi-statement string. The id is asked of the server
(not taken from the handshake), so a KILL aims at the session the server itself names."""

_SESSION_IDS: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
"""CONNECTION_ID() of each live connection :func:`connect` made."""


def connect(params: dict[str, Any], database: str | None, *, found_rows: bool = True) -> Any:
    """A new autocommit PyMySQL connection with the kit's session settings."""
    wants_tls = "ssl" in params or any(key in params for key in (*_URL_PATHS[1:], *_URL_FLAGS))
    conn = pymysql.connect(
        **params,
        # Without this PyMySQL builds a TLS context on every connect (about 250 ms here, against 2 ms),
        # even for a server that offers no TLS; the URL's ssl options turn TLS on.
        ssl_disabled=not wants_tls,
        database=database,
        charset="utf8mb4",
        collation="utf8mb4_bin",  # literals compare byte-exactly too, not in the server's CI default
        autocommit=True,  # the store issues START TRANSACTION / COMMIT itself (no forgotten implicit tx)
        # MULTI_STATEMENTS: the store sends a transaction's queued statements as one string (one round trip).
        client_flag=(CLIENT.FOUND_ROWS if found_rows else 0) | CLIENT.MULTI_STATEMENTS,
        conv=_CONVERSIONS,
        connect_timeout=10,
    )
    try:
        with conn.cursor() as cur:
            cur.execute(_SESSION_SETUP)  # one round trip: the settings, then the session's id
            row = None
            while cur.nextset():  # the last result is CONNECTION_ID()'s row
                row = cur.fetchone()
            if row is None:
                raise pymysql.err.InterfaceError("the server answered no CONNECTION_ID() to the session setup")
            _SESSION_IDS[conn] = int(row[0])
    except BaseException:
        conn.close()
        raise
    return conn


def session_id(conn: Any) -> int:
    """The server's ``CONNECTION_ID()`` of a connection: read when :func:`connect` made it, else (a
    connection wrapped by a caller, say) asked of the server now."""
    try:
        return _SESSION_IDS[conn]
    except (KeyError, TypeError):  # TypeError: not weak-referenceable, so not one of ours
        with conn.cursor() as cur:
            cur.execute("SELECT CONNECTION_ID()")
            return int(cur.fetchone()[0])


def server_version(conn: Any) -> tuple[str, tuple[int, ...]]:
    """(``"MariaDB 10.11.19"`` / ``"MySQL 8.0.36"``, numeric version) of a connection's server."""
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        raw = str(cur.fetchone()[0])
    flavor = "MariaDB" if "mariadb" in raw.lower() else "MySQL"
    number = raw.split("-", 1)[0]
    parts = tuple(int(p) for p in number.split(".") if p.isdigit())
    return f"{flavor} {number}", parts


def _require_skip_locked(label: str, parts: tuple[int, ...]) -> None:
    minimum = (10, 6) if label.startswith("MariaDB") else (8, 0, 1)
    if parts < minimum:
        raise BackendUnavailable(
            "mysql",
            f"{label} has no SELECT ... FOR UPDATE SKIP LOCKED",
            "Use MySQL >= 8.0.1 or MariaDB >= 10.6",
        )


def probe(url: str) -> str:
    """Connect to ``url`` and return the server's label; raise if it cannot serve the kit."""
    try:
        conn = connect(connect_params(url), None)
    except RuntimeError as exc:  # PyMySQL: caching_sha2_password over plain TCP needs `cryptography`
        raise RuntimeError(f"{exc}: pip install cryptography, or use a mysql_native_password user") from None
    try:
        label, parts = server_version(conn)
    finally:
        conn.close()
    _require_skip_locked(label, parts)
    return label


def start_container() -> tuple[str, Any]:
    """Start a throw-away server with testcontainers; its URL and the container to stop."""
    try:
        from testcontainers.community.mysql import MySqlContainer
    except ImportError:  # testcontainers < 4.13 kept the module at the top level
        from testcontainers.mysql import MySqlContainer

    image = os.environ.get("KIT_MYSQL_IMAGE", DEFAULT_IMAGE)
    container: Any = None
    try:
        container = MySqlContainer(image, dialect="pymysql", username="root", password=secrets.token_hex(12))
        container.start()
    except Exception as exc:  # noqa: BLE001 - reported as unavailable, with the reason
        if container is not None:
            with contextlib.suppress(Exception):  # a half-started container: best effort
                container.stop()
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:160]
        raise BackendUnavailable(
            "mysql", f"testcontainers could not start {image} ({first})",
            "Check the Docker engine and the image name (KIT_MYSQL_IMAGE), or give KIT_MYSQL_URL",
        ) from None
    url = container.get_connection_url()
    if "mariadb" in image.lower():
        return url, container  # MariaDB < 11.4 images have no TLS; their root uses native passwords
    # MySQL: TLS without verification (the server's auto-generated certificate is self-signed),
    # so caching_sha2_password authenticates without PyMySQL's optional `cryptography`.
    return f"{url}?ssl=true", container
