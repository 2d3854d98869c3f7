"""The kit reads database URLs exactly as SQLAlchemy does, without importing SQLAlchemy at start-up."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sqlalchemy.engine import make_url

from kit.contract.errors import ConfigurationError
from kit.discovery import parse_url

URLS = [
    "postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
    "postgresql+psycopg://postgres@/postgres?host=/var/run/postgresql",
    "postgresql://u:p%40ss@db.example:6543/d%20b?sslmode=require&options=-c%20x%3Dy",
    "postgresql+psycopg://u:@[::1]:5432/x",
    "postgresql+psycopg://@/",
    "mysql+pymysql://root@127.0.0.1:3306/test?ssl_ca=/ca.pem&ssl_verify_cert=true",
    "mysql+pymysql://root:s%3Acret@localhost/test?unix_socket=/run/mysqld.sock&charset=utf8mb4",
    "mysql://root@h?a=1&a=2&a=3&b=",
    "mssql+pyodbc://sa:Pw@127.0.0.1:1433/master?driver=ODBC+Driver+18+for+SQL+Server&TrustServerCertificate=yes",
    "mssql://sa@h/db",
    "sqlite:///some/dir",
    "sqlite:////abs/dir",
]


@pytest.mark.parametrize("url", URLS)
def test_every_part_is_read_as_sqlalchemy_reads_it(url: str) -> None:
    ours = parse_url(url, "any", ("postgresql", "mysql", "mssql", "sqlite"), "x")
    theirs = make_url(url)
    assert (ours.drivername, ours.username, ours.password, ours.host, ours.port, ours.database) == (
        theirs.drivername, theirs.username, theirs.password, theirs.host, theirs.port, theirs.database
    )
    assert ours.query == dict(theirs.query)
    assert ours.get_backend_name() == theirs.get_backend_name()
    if ours.get_backend_name() == "mssql":
        assert ours.get_driver_name() == theirs.get_driver_name()


@pytest.mark.parametrize("url", ["not a url", "postgresql+psycopg://h:port/x", "://x"])
def test_a_malformed_url_is_refused_naming_the_form(url: str) -> None:
    with pytest.raises(ConfigurationError, match="write it like postgresql://"):
        parse_url(url, "postgres", ("postgresql",), "postgresql://u@h/db")


def test_the_command_line_starts_without_importing_sqlalchemy() -> None:
    code = (
        "import sys, kit.cli, kit.discovery, adapters._postgres_connect, adapters._mysql_connect;"
        "adapters._postgres_connect.connect_params('postgresql+psycopg://u@h:5/d');"
        "adapters._mysql_connect.connect_params('mysql+pymysql://u@h:5/d');"
        "print(sorted(m for m in sys.modules if m.startswith('sqlalchemy')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
