"""Sessions: tests, conformance (per backend), mutants (the kill table), lint.

    nox -s conformance                 # the suite on the embedded SQLite default
    nox -s conformance -- postgres     # any backend name, or package.module:factory [--url URL]
    nox -s mutants                     # every seeded bug against the whole suite
    nox -s mutants -- --machines-only --seeds 10 sqlite   # the machines' power per seed
    nox -s coverage                    # the checks no fault-machine rule reaches, with the reason
    nox -s swarm_bench                 # time to kill every seeded bug with 1 and 2 workers; examples/s
    nox -s mssql                       # SQL Server: static T-SQL proof + whole suite (Docker or KIT_MSSQL_URL)
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
def mssql(session: nox.Session) -> None:
    """SQL Server, fully: the static T-SQL proof, then `kit check mssql` (suite and fault machines),
    the pytest suite and `kit stress`,
    required (never skipped), on KIT_MSSQL_URL or else a testcontainers SQL Server 2022.

    Needs a Docker engine (or KIT_MSSQL_URL) and, on this host, unixODBC plus an ODBC
    driver: Microsoft's msodbcsql18, or Debian's tdsodbc (FreeTDS).
    """
    session.install("-e", ".[mssql,docker,test]")
    session.run("python", "-m", "pytest", "tests/test_mssql_static.py", "-q")
    required = {"KIT_REQUIRE_BACKENDS": "mssql"}
    session.run("kit", "check", "mssql", "--no-progress", *session.posargs, env=required)
    session.run("python", "-m", "pytest", "tests/test_conformance_mssql.py", "-q", env=required)
    session.run("kit", "stress", "--backend", "mssql", "--no-progress", env=required)


@nox.session
def mutants(session: nox.Session) -> None:
    """Kill table of every seeded bug against the whole suite (a benchmark: figures, not assertions)."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "tests.seeded_bugs", *session.posargs)


@nox.session
def swarm_bench(session: nox.Session) -> None:
    """Time to kill each seeded bug with 1 and 2 workers, and machine examples per second (figures only)."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "tests.seeded_bugs.swarm_bench", *session.posargs)


@nox.session
def coverage(session: nox.Session) -> None:
    """The conformance checks whose guarantee no fault-machine rule reaches, each with its reason."""
    session.install("-e", ".")
    session.run("python", "-m", "kit.machines.coverage", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Runtime decisions per second per backend with 4 workers, and issue 16's speed goals as ratios
    measured in the same run (figures, not assertions)."""
    session.install("-e", ".[postgres,mysql]")
    session.run("python", "-m", "kit.runtime.bench", *session.posargs)


@nox.session
def stress_bench(session: nox.Session) -> None:
    """`kit stress` loop (free and deterministic) vs a plain driver loop (tx/s), and peak memory of a 10x longer run (figures only)."""
    session.install("-e", ".[postgres,mysql]")
    session.run("python", "-m", "kit.workload.bench", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("-e", ".[test,lint]")
    session.run("ruff", "check", "kit", "adapters", "tests")
    session.run("mypy", "kit", "adapters")
