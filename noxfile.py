"""Sessions: tests, conformance (per backend), mutants (the kill table), lint.

    nox -s conformance                 # the suite on the embedded SQLite default
    nox -s conformance -- postgres     # any backend name, or package.module:factory [--url URL]
    nox -s mutants                     # every seeded bug against the whole suite
"""

from __future__ import annotations

import nox

nox.options.sessions = ["tests", "conformance"]
nox.options.reuse_existing_virtualenvs = True


@nox.session
def tests(session: nox.Session) -> None:
    """The kit's own tests (what CI runs)."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session
def conformance(session: nox.Session) -> None:
    """`kit check` against one backend (default sqlite)."""
    args = session.posargs or ["sqlite"]
    extra = {"postgres": "[postgres]", "mysql": "[mysql]", "mssql": "[mssql]"}.get(args[0], "")
    session.install("-e", f".{extra}")
    session.run("kit", "check", *args)


@nox.session
def mutants(session: nox.Session) -> None:
    """Kill table of every seeded bug against the whole suite (a benchmark: figures, not assertions)."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "tests.seeded_bugs", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("-e", ".[test]", "ruff", "mypy")
    session.run("ruff", "check", "kit", "adapters", "tests")
    session.run("mypy", "kit", "adapters")
