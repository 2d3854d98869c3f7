"""The PostgreSQL adapter passes the whole conformance suite on a real server.

The server is discovered (``KIT_POSTGRES_URL``, else the local default port and
socket, else testcontainers). With none reachable every check skips as
``not-reachable``; with ``KIT_REQUIRE_BACKENDS`` naming ``postgres`` (as CI
sets it) that is a failure instead.
"""

from collections.abc import Iterator

import pytest

from kit.conformance import ConformanceSuite
from kit.contract import Backend
from kit.pytest_plugin import skip_module_unless_reachable, use_backend

skip_module_unless_reachable("postgres")  # one line when the server is absent, not one per check


class TestPostgres(ConformanceSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def kit_backend(cls) -> Iterator[Backend]:
        yield from use_backend("postgres")
