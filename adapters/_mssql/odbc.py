"""ODBC plumbing for SQL Server: the lazy pyodbc import, connection strings, error codes.

Guarantees:

* pyodbc is imported only when a connection is about to be made
  (:func:`import_pyodbc`); a missing package or a missing native driver manager
  (``libodbc.so.2``) is a :class:`BackendUnavailable` naming what to install.
* A ``mssql+pyodbc://`` URL becomes an ODBC connection string
  (:class:`OdbcTarget`); the password only ever appears inside that string,
  never in a message. Both Microsoft's ODBC Driver 18/17 and FreeTDS (Debian's
  ``tdsodbc``) are supported; with no ``?driver=`` the first installed of those
  is used.
* Driver errors are read as (SQLSTATE, native error numbers, text)
  (:func:`error_facts`), which is all :meth:`MssqlDialect.translate` needs.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kit.contract.errors import BackendUnavailable, ConfigurationError

__all__ = [
    "CONNECT_TIMEOUT_S",
    "EXAMPLE",
    "PREFERRED_DRIVERS",
    "ErrorFacts",
    "OdbcTarget",
    "error_facts",
    "first_line",
    "import_pyodbc",
    "resolve_driver_errors",
]

EXAMPLE = (
    "mssql+pyodbc://sa:password@localhost:1433/master"
    "?driver=ODBC+Driver+18+for+SQL+Server&TrustServerCertificate=yes"
)
PREFERRED_DRIVERS = ("ODBC Driver 18 for SQL Server", "ODBC Driver 17 for SQL Server", "FreeTDS")
"""Tried in this order when the URL names no ``driver``."""
CONNECT_TIMEOUT_S = 15
"""The ODBC login timeout."""
FREETDS_TDS_VERSION = "7.4"
"""TDS 7.4 (SQL Server 2012+): what FreeTDS needs for NVARCHAR(MAX) and VARBINARY(MAX)."""

# Keywords only Microsoft's driver understands; dropped for FreeTDS, which has its own
# (``Encryption=``) and may refuse unknown ones.
_MICROSOFT_ONLY = frozenset({"trustservercertificate", "encrypt", "hostnameincertificate"})
_NATIVE = re.compile(r"\((\d+)\)")


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:240]


def import_pyodbc() -> Any:
    """The pyodbc module, with ODBC connection pooling off; or BackendUnavailable naming the fix.

    Pooling is switched off because a pooled connection stays logged in to its
    database after ``close()``, and ``DROP DATABASE`` of a kit namespace would then
    find it in use. (pyodbc reads the flag when it opens its first connection.)
    """
    try:
        pyodbc: Any = importlib.import_module("pyodbc")
    except ModuleNotFoundError:
        raise BackendUnavailable(
            "mssql",
            "the pyodbc package is not installed",
            # No square brackets: the CLI prints messages through Rich markup.
            "Install it with: pip install pyodbc (the kit's mssql extra)",
        ) from None
    except ImportError as exc:  # pyodbc is there, libodbc.so.2 (unixODBC) is not
        raise BackendUnavailable(
            "mssql",
            f"pyodbc cannot load the ODBC driver manager ({first_line(exc)})",
            "Install unixODBC and a SQL Server ODBC driver: on Debian/Ubuntu "
            "`apt-get install unixodbc tdsodbc` (FreeTDS), or Microsoft's msodbcsql18",
        ) from None
    pyodbc.pooling = False
    return pyodbc


def _braced(value: str) -> str:
    """An ODBC attribute value, braced when it holds a separator or a brace."""
    if any(c in value for c in ";{}=") or value != value.strip():
        return "{" + value.replace("}", "}}") + "}"
    return value


def _split_odbc(text: str) -> dict[str, str]:
    """``KEY=value;KEY={va;lue}`` into an ordered dict (keys as written)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(text):
        eq = text.find("=", i)
        if eq < 0:
            break
        key = text[i:eq].strip()
        j = eq + 1
        if j < len(text) and text[j] == "{":
            value, j = [], j + 1
            while j < len(text):
                if text[j] == "}":
                    if text[j + 1 : j + 2] == "}":
                        value.append("}")
                        j += 2
                        continue
                    j += 1
                    break
                value.append(text[j])
                j += 1
            out[key] = "".join(value)
            semi = text.find(";", j)
            i = len(text) if semi < 0 else semi + 1
        else:
            semi = text.find(";", j)
            end = len(text) if semi < 0 else semi
            out[key] = text[j:end].strip()
            i = end + 1
        if not key:
            out.pop(key, None)
    return out


@dataclass(frozen=True)
class OdbcTarget:
    """Where and how to connect, parsed once from a ``mssql+pyodbc://`` URL."""

    attributes: Mapping[str, str]
    """ODBC attributes except DRIVER and DATABASE (UID, PWD, SERVER, pass-through options)."""
    driver: str | None
    """The ODBC driver name from the URL; None: the first of :data:`PREFERRED_DRIVERS` installed."""
    database: str
    """The database the URL names (the admin connection's); ``master`` when it names none."""

    @classmethod
    def from_url(cls, url: str) -> OdbcTarget:
        """Parse ``url``; a malformed or non-pyodbc URL is a ConfigurationError naming the fix."""
        from kit.discovery import parse_url, redact

        parsed = parse_url(url, "mssql", ("mssql",), EXAMPLE)
        if parsed.get_driver_name() != "pyodbc":
            raise ConfigurationError(
                f"{redact(url)!r} uses the {parsed.get_driver_name()!r} driver; the kit's SQL Server "
                f"adapter runs on pyodbc: write it like {EXAMPLE}"
            )
        query = {k: (v[-1] if isinstance(v, tuple) else v) for k, v in parsed.query.items()}
        driver = query.pop("driver", None)
        raw = query.pop("odbc_connect", None)
        attrs: dict[str, str] = {}
        database = parsed.database or ""
        if raw is not None:  # SQLAlchemy's escape hatch: a whole ODBC connection string
            for key, value in _split_odbc(raw).items():
                upper = key.upper()
                if upper == "DRIVER":
                    driver = driver or value
                elif upper == "DATABASE":
                    database = database or value
                elif upper in ("SERVER", "PORT", "UID", "PWD"):
                    attrs[upper] = value  # one spelling, so connection_string() finds them
                else:
                    attrs[key] = value
        elif not parsed.host:
            raise ConfigurationError(f"{redact(url)!r} names no host: write it like {EXAMPLE}")
        else:
            attrs["SERVER"] = parsed.host
            if parsed.port:
                attrs["PORT"] = str(parsed.port)
            if parsed.username:
                attrs["UID"] = parsed.username
            if parsed.password is not None:
                attrs["PWD"] = str(parsed.password)
        for key, value in query.items():
            attrs[key] = str(value)
        return cls(attrs, driver.strip("{}") if driver else None, database or "master")

    def choose_driver(self, installed: Callable[[], list[str]]) -> str:
        """The URL's driver, else the first preferred driver pyodbc reports installed."""
        if self.driver:
            return self.driver
        available = installed()
        for name in PREFERRED_DRIVERS:
            if name in available:
                return name
        raise BackendUnavailable(
            "mssql",
            f"no SQL Server ODBC driver is installed (unixODBC lists {available or 'none'})",
            "Install Microsoft's msodbcsql18 or Debian's tdsodbc (FreeTDS), or name an installed "
            "driver in the URL with ?driver=...",
        )

    def connection_string(self, driver: str, database: str | None = None, app: str = "kit") -> str:
        """The ODBC connection string for ``database`` (default: the URL's) through ``driver``."""
        freetds = "freetds" in driver.lower()
        attrs = dict(self.attributes)
        port = attrs.pop("PORT", None)
        parts = [f"DRIVER={{{driver}}}"]
        if "SERVER" in attrs:
            server = attrs.pop("SERVER")
            if freetds:  # FreeTDS takes the port as its own attribute
                parts.append(f"SERVER={_braced(server)}")
                if port:
                    parts.append(f"PORT={port}")
            else:  # Microsoft's driver: host,port
                parts.append(f"SERVER={_braced(server + (',' + port if port else ''))}")
        elif port:
            parts.append(f"PORT={port}")
        if freetds and not any(k.upper() == "TDS_VERSION" for k in attrs):
            parts.append(f"TDS_Version={FREETDS_TDS_VERSION}")
        parts.append(f"DATABASE={_braced(database or self.database)}")
        if not any(k.upper() == "APP" for k in attrs):
            parts.append(f"APP={_braced(app)}")
        for key, value in attrs.items():
            if freetds and key.lower() in _MICROSOFT_ONLY:
                continue
            parts.append(f"{key}={_braced(value)}")
        return ";".join(parts)


@dataclass(frozen=True)
class ErrorFacts:
    """What a driver error says: its SQLSTATE, the server's native error numbers, its text."""

    sqlstate: str | None
    codes: frozenset[int]
    text: str


def error_facts(error: BaseException) -> ErrorFacts:
    """Read a pyodbc error: ``args`` is ``(sqlstate, message)`` and each diagnostic record in
    the message ends with ``(native error) (SQLFunction)``, records joined by ``;``."""
    args: tuple[Any, ...] = tuple(getattr(error, "args", ()))
    state = args[0] if len(args) >= 2 and isinstance(args[0], str) else None
    text = args[1] if len(args) >= 2 and isinstance(args[1], str) else str(error)
    codes = frozenset(int(n) for n in _NATIVE.findall(text))
    return ErrorFacts(state, codes, text)


def resolve_driver_errors() -> tuple[type[BaseException], ...]:
    """``(pyodbc.Error,)`` when pyodbc can be imported, else ``()`` (then no connection exists)."""
    try:
        module: Any = importlib.import_module("pyodbc")
    except ImportError:
        return ()
    return (module.Error,)
