"""The SQL Server adapter passes the whole conformance suite on a real server.

The server is discovered: ``KIT_MSSQL_URL`` (``mssql+pyodbc://...``, Microsoft's
ODBC Driver 18 or FreeTDS), else a testcontainers SQL Server 2022 when a Docker
engine answers. There is no local default. With neither, the module skips as
``not-reachable`` with the reason naming both ways; with ``KIT_REQUIRE_BACKENDS``
naming ``mssql`` (as ``.github/workflows/mssql.yml`` and ``nox -s mssql`` set
it) that is a failure instead.
"""

from collections.abc import Iterator

import pytest

from kit.conformance import ConformanceSuite
from kit.contract import Backend
from kit.pytest_plugin import skip_module_unless_reachable, use_backend

skip_module_unless_reachable("mssql")  # one line when the server is absent, not one per check


class TestMssql(ConformanceSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def kit_backend(cls) -> Iterator[Backend]:
        yield from use_backend("mssql")
