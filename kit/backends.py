"""The backend registry: a name (or ``package.module:factory``) to a ready :class:`Backend`.

Built-in names map to factories in the kit's own packages; any other
``module:attribute`` is a third-party adapter factory. A factory is called with
``url=`` when a URL is given and without arguments otherwise, and must return an
object with ``name``, ``capabilities`` and ``provision()``. Every failure is a
:class:`ConfigurationError` (bad input: fix the call) or a
:class:`BackendUnavailable` (good input, but the backend cannot be used here:
the message names what to provide).
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.contract.errors import BackendUnavailable, ConfigurationError
from kit.contract.protocol import Backend

__all__ = ["BUILTIN", "BackendSpec", "load_factory", "resolve"]


@dataclass(frozen=True)
class BackendSpec:
    name: str
    target: str
    """``module:callable`` returning the backend."""
    extra: str | None
    """The pip extra that installs its driver, if it needs one."""
    summary: str


BUILTIN: dict[str, BackendSpec] = {
    spec.name: spec
    for spec in (
        BackendSpec("memory", "kit.reference:MemoryBackend", None, "in-memory reference engine (the oracle)"),
        BackendSpec("sqlite", "adapters.sqlite:SqliteBackend", None, "SQLite files, embedded (the default)"),
        BackendSpec("postgres", "adapters.postgres:discover", "postgres", "PostgreSQL through psycopg 3"),
        BackendSpec("mysql", "adapters.mysql:discover", "mysql", "MySQL / MariaDB through PyMySQL"),
        BackendSpec("mssql", "adapters.mssql:discover", "mssql", "SQL Server through pyodbc"),
    )
}


def _import_here_or_installed(module_name: str) -> Any:
    """Import an installed module, else one under the current folder (as ``python -m`` would find it)."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        here = os.getcwd()
        top = module_name.split(".", 1)[0]
        if exc.name != top or here in sys.path or not (Path(here, top).is_dir() or Path(here, top + ".py").is_file()):
            raise
        sys.path.append(here)
        return importlib.import_module(module_name)


def load_factory(target: str) -> Any:
    """Import ``module:attribute``; errors name the fix."""
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigurationError(
            f"{target!r} is neither a backend name ({', '.join(BUILTIN)}) nor an import path: "
            "write package.module:factory"
        )
    try:
        module = _import_here_or_installed(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise ConfigurationError(
                f"cannot import module {module_name!r}: check the spelling of {target!r} and that "
                "its package is installed in this environment"
            ) from None
        raise
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ConfigurationError(
            f"module {module_name!r} has no attribute {attribute!r}: check the factory name in {target!r}"
        ) from None


def resolve(spec: str, url: str | None = None) -> Backend:
    """The backend ``spec`` names, connected (for servers) and ready to provision databases."""
    if not spec:
        raise ConfigurationError(f"no backend given: choose one of {', '.join(BUILTIN)} or package.module:factory")
    builtin = BUILTIN.get(spec)
    target = builtin.target if builtin else spec
    if builtin is None and ":" not in spec:
        raise ConfigurationError(
            f"unknown backend {spec!r}: choose one of {', '.join(BUILTIN)}, or give a third-party "
            "adapter as package.module:factory"
        )
    try:
        factory = load_factory(target)
    except ModuleNotFoundError as exc:
        if builtin is not None and builtin.extra:
            raise BackendUnavailable(
                spec,
                f"its driver ({exc.name}) is not installed",
                f"Install it with: pip install 'durable-storage-kit[{builtin.extra}]'",
            ) from None
        raise ConfigurationError(f"importing {target!r} failed: {exc}") from None
    if not callable(factory):
        raise ConfigurationError(f"{target!r} is not callable: point at a factory or a Backend class")
    try:
        backend = factory(url=url) if url is not None else factory()
    except TypeError as exc:
        if url is not None and "url" in str(exc):
            raise ConfigurationError(f"backend {spec!r} takes no URL: drop --url") from None
        raise
    for needed in ("name", "capabilities", "provision"):
        if not hasattr(backend, needed):
            raise ConfigurationError(
                f"{target!r} returned {type(backend).__name__}, which has no {needed!r}: a factory must "
                "return a kit.contract.Backend"
            )
    try:
        backend.kit_spec = spec  # how `kit replay` names this backend again
    except AttributeError:
        pass
    return backend  # type: ignore[no-any-return]
