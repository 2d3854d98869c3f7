"""The module ``kit check`` hands to pytest: the whole suite bound to the injected backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kit.conformance import ConformanceSuite
from kit.contract import Backend
from kit.pytest_plugin import use_backend
from kit.runner import BACKEND_KEY


class TestConformance(ConformanceSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def kit_backend(cls, request: pytest.FixtureRequest) -> Iterator[Backend]:
        injected = request.config.stash.get(BACKEND_KEY, None)
        if injected is not None:
            yield injected
            return
        name = request.config.getoption("kit_backend") or "sqlite"
        yield from use_backend(name, request.config.getoption("kit_url"), request.config.getoption("kit_require"))
