"""What a report says about its run: versions, secret-free text, and commands that reproduce a failure.

Guarantee: text passed through a :class:`Scrubber` holds no password of a
SQLAlchemy URL, of a libpq-style ``password=...`` pair, or of any secret the
scrubber was given (the passwords of the URLs in use), so reports can be
shared as they are.
"""

from __future__ import annotations

import os
import platform
import re
import shlex
from collections.abc import Iterable
from importlib import metadata
from typing import Any
from urllib.parse import quote

from kit import __version__
from kit.discovery import password_of, redact

__all__ = [
    "Scrubber",
    "environment_versions",
    "replay_command",
    "reproduce_command",
    "test_name",
]

_URL_WITH_CREDENTIALS = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>@/]*@[^\s'\"<>]*")
_KEY_VALUE_PASSWORD = re.compile(r"(?i)\b(password|passwd|pwd)(\s*[=:]\s*)('[^']*'|\"[^\"]*\"|[^\s;,'\"]+)")
_MIN_SECRET = 4
"""Shorter secrets are not replaced as bare words (that would mangle text); URLs are still redacted."""

_DRIVERS = {"postgres": "psycopg", "mysql": "PyMySQL", "mssql": "pyodbc"}


class Scrubber:
    """Removes passwords from any JSON-able value before it reaches a report file."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        words: set[str] = set()
        for secret in secrets:
            if secret and len(secret) >= _MIN_SECRET:
                words.update({secret, quote(secret, safe=""), quote(secret)})
        self._secrets = sorted(words, key=len, reverse=True)

    @classmethod
    def for_urls(cls, urls: Iterable[str | None]) -> Scrubber:
        """A scrubber that knows the passwords of ``urls`` and of every ``KIT_*_URL`` variable."""
        candidates = [u for u in urls if u]
        candidates += [v for k, v in os.environ.items() if k.startswith("KIT_") and k.endswith("_URL") and v]
        secrets: list[str] = []
        for url in candidates:
            password = password_of(url)
            if password:
                secrets.append(password)
                secrets.extend(p for p in re.split(r"[@:]", password) if len(p) >= _MIN_SECRET)
        return cls(secrets)

    def text(self, value: str) -> str:
        """``value`` with credentials in URLs, ``password=`` pairs and known secrets replaced by ``***``."""
        value = _URL_WITH_CREDENTIALS.sub(lambda m: redact(m.group(0)), value)
        value = _KEY_VALUE_PASSWORD.sub(lambda m: f"{m.group(1)}{m.group(2)}***", value)
        for secret in self._secrets:
            value = value.replace(secret, "***")
        return value

    def __call__(self, value: Any) -> Any:
        """Scrub every string inside ``value`` (dicts, lists and tuples are walked)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self(k) if isinstance(k, str) else k: self(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self(v) for v in value]
        return value


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def environment_versions(backend: object | None = None, name: str | None = None) -> dict[str, str]:
    """Versions of the kit, Python, pytest, Hypothesis, SQLAlchemy, the driver and the server.

    A backend may add or override entries with an optional ``versions()``
    method returning ``{name: version}``; servers found by discovery report
    their version through their handle. Without a backend object, ``name``
    (a built-in backend name) still gives the driver's version.
    """
    versions: dict[str, str] = {
        "kit": __version__,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(terse=True),
    }
    for dist in ("pytest", "hypothesis", "SQLAlchemy"):
        found = _dist_version(dist)
        if found:
            versions[dist.lower()] = found
    name = str(getattr(backend, "name", "") or name or "")
    if name == "sqlite":
        import sqlite3

        versions["driver"] = "sqlite3 (Python standard library)"
        versions["server"] = f"SQLite {sqlite3.sqlite_version}"
    elif name == "memory":
        versions["driver"] = "none (in-process)"
        versions["server"] = f"kit reference engine {__version__}"
    elif name in _DRIVERS:
        found = _dist_version(_DRIVERS[name])
        versions["driver"] = f"{_DRIVERS[name]} {found}" if found else f"{_DRIVERS[name]} (not installed)"
    server = getattr(getattr(backend, "handle", None), "version", "")
    if server:
        versions["server"] = str(server)
    hook = getattr(backend, "versions", None)
    if callable(hook):
        try:
            extra = hook()
        except Exception as exc:  # noqa: BLE001 - a broken hook must not cost the report
            extra = {"versions-hook-error": f"{type(exc).__name__}: {exc}"}
        if isinstance(extra, dict):
            versions.update({str(k): str(v) for k, v in extra.items()})
    if backend is not None:  # a third-party adapter: say what it is, never a blank cell
        describe = getattr(backend, "describe", None)
        try:
            described = str(describe()) if callable(describe) else ""
        except Exception:  # noqa: BLE001 - a broken describe() must not cost the report
            described = ""
        versions.setdefault("server", described or _NOT_REPORTED)
        versions.setdefault("driver", _NOT_REPORTED)
    return versions


_NOT_REPORTED = "not reported by the adapter (add a versions() method returning {'driver': ..., 'server': ...})"


_REPLAY = re.compile(r"(kit replay \S+(?: --backend \S+)?)")


def replay_command(text: str) -> str | None:
    """The ``kit replay BUNDLE --backend X`` command a fault-machine failure names, if any."""
    match = _REPLAY.search(text)
    return match.group(1) if match else None


def test_name(nodeid: str) -> str:
    """The test function of a pytest node id, without parameters (what ``-k`` selects)."""
    return nodeid.rsplit("::", 1)[-1].split("[", 1)[0]


test_name.__test__ = False  # type: ignore[attr-defined]  # not a test for pytest's collector


def reproduce_command(
    result: dict[str, Any], spec: str, url: str | None = None, seed: int | None = None,
    profile: str | None = None,
) -> str:
    """The shortest command that re-runs a failed check: its ``kit replay`` line, else ``kit check -k``."""
    replay = replay_command(f"{result.get('message', '')}\n{result.get('details', '')}")
    if replay:
        return replay
    parts = ["kit", "check", shlex.quote(spec)]
    if url:
        parts += ["--url", shlex.quote(redact(url))]
    parts += ["-k", shlex.quote(test_name(str(result.get("nodeid", ""))) or str(result.get("check", "")))]
    if result.get("area") == "machines" and seed is not None:
        from kit.swarm import exploration_seed

        seed = exploration_seed(str(result.get("nodeid", "")), int(seed))  # the exploration's own seed
        parts += ["--seed", str(seed)] + (["--profile", profile] if profile else [])
    return " ".join(parts)
