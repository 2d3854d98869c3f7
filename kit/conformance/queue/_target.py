"""The module ``kit check`` hands to pytest for a queue-profile backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kit.conformance.queue import QueueSuite
from kit.pytest_plugin import use_backend
from kit.queue import QueueBackend
from kit.runner import BACKEND_KEY


class TestQueueConformance(QueueSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def kit_backend(cls, request: pytest.FixtureRequest) -> Iterator[QueueBackend]:
        injected = request.config.stash.get(BACKEND_KEY, None)
        if injected is not None:
            yield injected  # type: ignore[misc]
            return
        name = request.config.getoption("kit_backend") or "kit.queue.reference:MemoryQueueBackend"
        yield from use_backend(name, request.config.getoption("kit_url"),  # type: ignore[misc]
                               request.config.getoption("kit_require"))
