"""Finding a server: explicit URL, then the local default, then testcontainers, else a clear skip.

URLs are SQLAlchemy URLs (``postgresql+psycopg://``, ``mysql+pymysql://``,
``mssql+pyodbc://``, ``sqlite:///``), read with SQLAlchemy's own grammar (without importing it). A
password never leaves this module unredacted in a message.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kit.contract.errors import ConfigurationError

__all__ = [
    "ParsedUrl",
    "ServerHandle",
    "discover",
    "docker_engine",
    "env_url",
    "parse_url",
    "password_of",
    "redact",
    "tcp_open",
]

def _split_credentials(url: str) -> tuple[str, str, str | None, str] | None:
    """(scheme://, user, password or None, @rest) of ``url``, or None when it has no credentials.

    The credentials end at the *last* ``@`` before the query string: a password with
    an unencoded ``@`` (``s3c@ret``) stays whole, where a URL parser would end it at
    the first ``@`` and take its tail for the host.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return None
    head, question, query = rest.partition("?")
    userinfo, at, host = head.rpartition("@")
    if not at:
        return None
    user, colon, password = userinfo.partition(":")
    return f"{scheme}://", user, password if colon else None, f"@{host}{question}{query}"


def password_of(url: str) -> str | None:
    """The password ``url`` carries (percent-encoded or not, ``@`` and all), if any."""
    parts = _split_credentials(url)
    if parts is None or not parts[2]:
        return None
    from urllib.parse import unquote

    return unquote(parts[2])


_QUERY_PASSWORD = re.compile(r"(?i)([?&](?:password|passwd|pwd)=)[^&]*")


def redact(url: str) -> str:
    """``url`` safe to print: the password replaced by ``***``, even if the URL is malformed.

    Every character between the user's ``:`` and the last ``@`` of the credentials
    is hidden, so no part of a password with an unencoded ``@`` is ever printed; a
    ``password=`` query parameter is hidden too.
    """
    parts = _split_credentials(url)
    if parts is not None:
        scheme, user, password, rest = parts
        url = f"{scheme}{user}{':***' if password is not None else ''}{rest}"
    return _QUERY_PASSWORD.sub(r"\1***", url)


_URL = re.compile(
    r"""
        (?P<name>[\w\+]+)://
        (?:
            (?P<username>[^:/]*)
            (?::(?P<password>[^@]*))?
        @)?
        (?:
            (?:
                \[(?P<ipv6host>[^/\?]+)\] |
                (?P<ipv4host>[^/:\?]+)
            )?
            (?::(?P<port>[^/\?]*))?
        )?
        (?:/(?P<database>[^\?]*))?
        (?:\?(?P<query>.*))?
    """,
    re.VERBOSE,
)
"""SQLAlchemy's own URL grammar (``sqlalchemy.engine.url._parse_url``), so the kit reads every URL
exactly as SQLAlchemy would without importing it (about 0.4 s of CPU per process)."""

_DEFAULT_DRIVERS = {"postgresql": "psycopg2", "mysql": "mysqldb", "mariadb": "mysqldb", "mssql": "pyodbc",
                    "sqlite": "pysqlite"}
"""SQLAlchemy's default driver of each dialect, for a URL that names none."""


@dataclass(frozen=True)
class ParsedUrl:
    """A database URL read the way ``sqlalchemy.engine.make_url`` reads it (the parts the kit uses)."""

    drivername: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    host: str | None = None
    port: int | None = None
    database: str | None = None
    query: dict[str, str | tuple[str, ...]] = field(default_factory=dict)

    def get_backend_name(self) -> str:
        return self.drivername.partition("+")[0]

    def get_driver_name(self) -> str:
        backend, plus, driver = self.drivername.partition("+")
        return driver if plus else _DEFAULT_DRIVERS.get(backend, "")


def _make_url(url: str) -> ParsedUrl:
    """``url`` parsed with SQLAlchemy's grammar; ValueError when it does not parse."""
    from urllib.parse import parse_qsl, unquote

    match = _URL.match(url)
    if match is None:
        raise ValueError("Could not parse the URL")
    parts = match.groupdict()
    query: dict[str, str | tuple[str, ...]] = {}
    for key, value in parse_qsl(parts["query"] or ""):
        old = query.get(key)
        query[key] = value if old is None else (*(old if isinstance(old, tuple) else (old,)), value)
    text = {k: None if parts[k] is None else unquote(parts[k]) for k in ("username", "password", "database")}
    return ParsedUrl(
        parts["name"],
        text["username"],
        text["password"],
        parts["ipv4host"] or parts["ipv6host"],
        int(parts["port"]) if parts["port"] else None,
        text["database"],
        query,
    )


def parse_url(url: str, backend: str, drivers: tuple[str, ...], example: str) -> ParsedUrl:
    """The parsed URL (read as SQLAlchemy reads it), or a ConfigurationError naming the fix."""
    parts = _split_credentials(url)
    if parts is not None and "@" in f"{parts[1]}:{parts[2] or ''}":
        raise ConfigurationError(
            f"the credentials of {redact(url)!r} hold an unencoded '@', so the host cannot be told apart: "
            "percent-encode it as %40 in the user or password"
        )
    try:
        parsed = _make_url(url)
    except ValueError:
        raise ConfigurationError(
            f"malformed {backend} URL {redact(url)!r}: write it like {example}"
        ) from None
    if parsed.get_backend_name() not in drivers:
        raise ConfigurationError(
            f"{redact(url)!r} is not a {backend} URL (scheme {parsed.drivername!r}): write it like {example}"
        )
    return parsed


def env_url(backend: str) -> str | None:
    """``KIT_<BACKEND>_URL`` if set and not empty."""
    value = os.environ.get(f"KIT_{backend.upper()}_URL", "").strip()
    return value or None


def tcp_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def docker_engine() -> tuple[bool, str]:
    """Whether a Docker engine answers (testcontainers needs one), and why not."""
    try:
        import docker  # testcontainers' own dependency
    except ImportError:
        return False, "the docker and testcontainers packages are not installed (pip install 'durable-storage-kit[docker]')"
    try:
        client = docker.from_env(timeout=3)
        client.ping()
        return True, "a Docker engine answers"
    except Exception as exc:  # noqa: BLE001 - any failure means no engine
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return False, f"no Docker engine answers ({first_line[:120]})"


@dataclass(frozen=True)
class ServerHandle:
    """Where a server was found, and how, safe to print."""

    backend: str
    url: str
    how: str
    """``url`` (given), ``local`` (default port) or ``testcontainers``."""
    version: str = ""

    def __str__(self) -> str:
        found = {"url": "given URL", "local": "local default", "testcontainers": "testcontainers"}[self.how]
        version = f", {self.version}" if self.version else ""
        return f"{self.backend} at {redact(self.url)} ({found}{version})"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]


def discover(
    backend: str,
    url: str | None,
    *,
    drivers: tuple[str, ...],
    example: str,
    local: tuple[str, ...],
    probe: Callable[[str], str],
    start_container: Callable[[], tuple[str, Any]] | None = None,
) -> tuple[ServerHandle, Any]:
    """Find a server in the one order every backend uses; return it and any container to stop.

    1. ``url`` or ``KIT_<BACKEND>_URL``: must connect, else the backend is unavailable
       (an explicit URL is never silently replaced by another server);
    2. each ``local`` default URL in turn;
    3. a testcontainers container when a Docker engine answers;
    4. otherwise :class:`BackendUnavailable` naming all three ways.

    ``probe(url)`` connects and returns the server version, raising if it cannot.
    """
    from kit.contract.errors import BackendUnavailable

    given = url or env_url(backend)
    if given:
        parse_url(given, backend, drivers, example)
        try:
            version = probe(given)
        except Exception as exc:  # noqa: BLE001 - any connection failure is reported as such
            raise BackendUnavailable(
                backend,
                f"cannot connect to {redact(given)} ({_first_line(exc)})",
                "Check the URL's host, port, user and database, and that the server is running",
            ) from None
        return ServerHandle(backend, given, "url", version), None
    tried = []
    for candidate in local:
        try:
            return ServerHandle(backend, candidate, "local", probe(candidate)), None
        except Exception as exc:  # noqa: BLE001 - try the next way
            tried.append(f"{redact(candidate)}: {_first_line(exc)}")
    docker_ok, docker_why = docker_engine()
    if docker_ok and start_container is not None:
        container_url, container = start_container()
        try:
            return ServerHandle(backend, container_url, "testcontainers", probe(container_url)), container
        except Exception:
            container.stop()
            raise
    raise BackendUnavailable(
        backend,
        f"no server found: no --url or KIT_{backend.upper()}_URL was given; "
        f"nothing answered locally ({'; '.join(tried) or 'no local default'}); testcontainers: {docker_why}",
        f"Give --url / KIT_{backend.upper()}_URL (like {example}), start a local server, or run a Docker engine",
    )
