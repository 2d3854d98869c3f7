"""The MySQL / MariaDB adapter passes the whole conformance suite.

Skipped (typed not-reachable, naming the three ways to provide a server) when
no server answers; failed instead when ``KIT_REQUIRE_BACKENDS`` names mysql.
"""

from collections.abc import Iterator

import pytest

from kit.conformance import ConformanceSuite
from kit.contract import Backend
from kit.pytest_plugin import skip_module_unless_reachable, use_backend

skip_module_unless_reachable("mysql")  # one line when the server is absent, not one per check


class TestMysql(ConformanceSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def kit_backend(cls) -> Iterator[Backend]:
        yield from use_backend("mysql")
