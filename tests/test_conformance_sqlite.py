"""The SQLite adapter passes the whole conformance suite."""

from collections.abc import Iterator

import pytest

from kit.conformance import ConformanceSuite
from kit.contract import Backend
from kit.pytest_plugin import use_backend


class TestSqlite(ConformanceSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def kit_backend(cls) -> Iterator[Backend]:
        yield from use_backend("sqlite")
