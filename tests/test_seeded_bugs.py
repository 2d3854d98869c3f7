"""The suite must catch every seeded bug and name the guarantee it broke."""

from __future__ import annotations

import pytest

from kit.contract import BackendUnavailable
from kit.pytest_plugin import required_backends
from kit.runner import run_suite
from tests.seeded_bugs._base import SeededBug
from tests.seeded_bugs.registry import all_bugs

ALL_BUGS: tuple[SeededBug, ...] = tuple(all_bugs())


@pytest.mark.parametrize("bug", ALL_BUGS, ids=[f"{b.backend}-{b.name}" for b in ALL_BUGS])
def test_suite_catches_seeded_bug(bug: SeededBug) -> None:
    try:
        backend = bug.make_backend()
    except BackendUnavailable as exc:  # a server-backed bug with no server here
        if bug.backend in required_backends():
            pytest.fail(f"not-reachable: {exc} (required by KIT_REQUIRE_BACKENDS)", pytrace=False)
        pytest.skip(f"not-reachable: {exc}")
    try:
        run = run_suite(backend, keyword=bug.keyword)
    finally:
        backend.close()
    assert run.results, f"no checks ran for {bug.name} (keyword {bug.keyword!r})"
    failed = {r.check: r for r in run.failed}
    caught = [c for c in bug.caught_by if c in failed]
    assert caught, (
        f"seeded bug {bug.name!r} ({bug.description}) survived: none of {list(bug.caught_by)} failed; "
        f"failures were {sorted(failed)}"
    )
    for check in caught:
        assert failed[check].guarantee, f"{check} failed without naming its guarantee"
