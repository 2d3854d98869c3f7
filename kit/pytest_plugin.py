"""The kit's pytest plugin (registered through the ``pytest11`` entry point).

Thin on purpose: options, the ``kit_backend`` fixture, and report hooks that
tag every conformance check with its id and guarantee so a failure names the
promise that was broken.

* ``--kit-backend NAME|package.module:factory`` and ``--kit-url URL`` select the
  adapter for suites that do not override ``kit_backend``.
* ``--kit-machine auto|reference|model-free`` picks the fault machine: ``auto``
  compares with the reference engine a store that promises the whole contract,
  and judges any other by the invariants alone.
* ``--kit-workers W``, ``--kit-shard I/N`` and ``--kit-example-db DIR|redis://HOST:PORT`` spread the
  fault machines over explorations with derived seeds, split a run over CI jobs, and replay the
  failures any run found first (:mod:`kit.swarm`); ``--kit-part suite|machines`` runs one part.
* ``--kit-require`` (or ``KIT_REQUIRE_BACKENDS=postgres,mysql``) turns "backend
  not reachable" from a skip into a failure: what CI uses to prove a suite ran.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from kit.contract.errors import BackendUnavailable, ConfigurationError
from kit.contract.protocol import Backend

if TYPE_CHECKING:
    from hypothesis.database import ExampleDatabase

    from kit.swarm import Shard

__all__ = [
    "kit_exploration",
    "machine_mode",
    "machine_run",
    "machine_settings",
    "required_backends",
    "session_seed",
    "skip_module_unless_reachable",
    "swarm_settings",
    "use_backend",
]

_SEED: pytest.StashKey[int] = pytest.StashKey()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kit", "durable-workflow storage kit")
    group.addoption("--kit-backend", default=None, help="backend name or package.module:factory")
    group.addoption("--kit-url", default=None, help="SQLAlchemy URL of the server to test (never printed with its password)")
    group.addoption("--kit-profile", default=None, choices=("smoke", "quick", "thorough", "none"),
                    help="fault-machine profile (default quick; KIT_PROFILE)")
    group.addoption("--kit-machine", default=None, choices=("auto", "reference", "model-free"),
                    help="fault machine: auto (default; model-free for a store that declares fewer promises), "
                         "reference (compare every step with the reference engine), model-free (invariants only); "
                         "KIT_MACHINE")
    group.addoption("--kit-seed", default=None,
                    help="seed of the fault machines (default: KIT_SEED, else a fresh one, printed)")
    group.addoption("--kit-seeds-dir", default=None,
                    help="where failing scenarios are saved (default scenarios/seeds; KIT_SEEDS_DIR)")
    group.addoption("--kit-workers", default=None,
                    help="fault-machine explorations per shard, each with its own seed derived from --kit-seed "
                         "(default 1; run them in parallel with pytest-xdist's -n)")
    group.addoption("--kit-shard", default=None,
                    help="run shard I/N: every Nth fixed check and every Nth exploration of the machines "
                         "(CI matrices; merge the shards' reports with kit report)")
    group.addoption("--kit-example-db", default=None,
                    help="Hypothesis example database of the fault machines: a folder, redis://HOST:PORT, or none "
                         "(default: KIT_EXAMPLE_DB, else none); failures saved there are replayed first")
    group.addoption("--kit-part", default="all", choices=("all", "suite", "machines"),
                    help="only the fixed checks (suite), only the fault-machine explorations (machines), or all")
    group.addoption(
        "--kit-require",
        action="store_true",
        default=False,
        help="fail, instead of skip, when the selected backend is not reachable",
    )


def required_backends() -> set[str]:
    """Backends that must be reachable (``KIT_REQUIRE_BACKENDS``, comma separated)."""
    raw = os.environ.get("KIT_REQUIRE_BACKENDS", "")
    return {part.strip() for part in raw.split(",") if part.strip()}


def use_backend(name: str, url: str | None = None, required: bool = False) -> Iterator[Backend]:
    """Resolve a backend for a fixture: skip (typed 'not-reachable') or fail if it cannot be used."""
    from kit.backends import resolve

    must = required or name in required_backends()
    try:
        backend = resolve(name, url)
    except BackendUnavailable as exc:
        message = f"not-reachable: {exc}"
        if must:
            pytest.fail(f"{message} (required by --kit-require / KIT_REQUIRE_BACKENDS)", pytrace=False)
        pytest.skip(message)
    except ConfigurationError as exc:
        pytest.fail(f"bad backend selection: {exc}", pytrace=False)
    try:
        yield backend
    finally:
        backend.close()


def skip_module_unless_reachable(name: str, url: str | None = None) -> None:
    """At a test module's top: skip the whole module in one line when ``name`` cannot be reached
    (instead of one skip per check), or fail it when ``KIT_REQUIRE_BACKENDS`` names the backend."""
    from kit.backends import resolve

    try:
        resolve(name, url).close()
    except BackendUnavailable as exc:
        if name in required_backends():
            pytest.fail(f"not-reachable: {exc} (required by KIT_REQUIRE_BACKENDS)", pytrace=False)
        pytest.skip(f"not-reachable: {exc}", allow_module_level=True)


@pytest.fixture(scope="session")
def kit_backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """The adapter under test, from ``--kit-backend``; suites may override this fixture."""
    name = request.config.getoption("kit_backend")
    if not name:
        pytest.skip(
            "not-reachable: no backend selected: pass --kit-backend NAME (or package.module:factory) "
            "or override the kit_backend fixture in your suite class"
        )
    yield from use_backend(name, request.config.getoption("kit_url"), request.config.getoption("kit_require"))


def session_seed(config: pytest.Config) -> int:
    """The one seed of this session: --kit-seed, else KIT_SEED, else fresh (and printed in the header)."""
    if _SEED not in config.stash:
        from kit.seeds import env_seed, fresh_seed, parse_seed

        raw = config.getoption("kit_seed", None)
        try:
            if raw is None:
                seed = env_seed()
            else:
                seed = None if raw == "random" else parse_seed(raw, "--kit-seed")
        except ConfigurationError as exc:
            raise pytest.UsageError(str(exc)) from None
        config.stash[_SEED] = fresh_seed() if seed is None else seed
    return config.stash[_SEED]


def machine_settings(config: pytest.Config, backend: Backend) -> tuple[str, int, str, str]:
    """(profile, seed, seeds folder, backend spec for `kit replay`) of this session."""
    profile = config.getoption("kit_profile", None) or os.environ.get("KIT_PROFILE") or "quick"
    seeds = config.getoption("kit_seeds_dir", None) or os.environ.get("KIT_SEEDS_DIR") or "scenarios/seeds"
    from kit.backends import spec_of

    spec = config.getoption("kit_backend", None) or spec_of(backend)
    if spec is None:
        spec = "<package.module:factory of this backend: set kit_spec on it so replay lines can name it>"
    return str(profile), session_seed(config), str(seeds), str(spec)


def pytest_configure(config: pytest.Config) -> None:
    """The suite's asserts show the values they compared, as in any pytest test file.

    pytest rewrites the asserts of test files, and of an installed plugin's package, but not of an
    editable install (a fresh clone's ``pip install -e .``); so ``kit.conformance`` is marked here,
    before the suite is imported. A check failing ``assert paged == sorted(ids)`` then reports both lists,
    not a bare ``AssertionError``.
    """
    if "kit.conformance" not in sys.modules:
        pytest.register_assert_rewrite("kit.conformance")


def swarm_settings(config: pytest.Config) -> tuple[int, Shard]:
    """(explorations per shard, shard) of this session, from --kit-workers and --kit-shard."""
    from kit.swarm import parse_shard

    raw = config.getoption("kit_workers", None) or "1"
    try:
        workers = int(str(raw), 10)
        if workers < 1:
            raise ValueError(raw)
        shard = parse_shard(config.getoption("kit_shard", None), "--kit-shard")
    except ValueError:
        raise pytest.UsageError(f"--kit-workers {raw!r} is not a whole number of at least 1: give e.g. 2") from None
    except ConfigurationError as exc:
        raise pytest.UsageError(str(exc)) from None
    return workers, shard


def machine_run(config: pytest.Config, seed: int, exploration: int, spec: str, machine: str,
                profile: str) -> tuple[int, ExampleDatabase | None]:
    """(seed, example database) of exploration ``exploration`` of ``machine``: the seed derived from the
    session's, and the database (--kit-example-db, else KIT_EXAMPLE_DB) under this backend's namespace."""
    from kit.seeds import derive_seed
    from kit.swarm import open_example_db

    spec_db = config.getoption("kit_example_db", None) or os.environ.get("KIT_EXAMPLE_DB") or None
    try:
        database = open_example_db(spec_db, f"{spec}/{machine}/{profile}")
    except ConfigurationError as exc:
        raise pytest.UsageError(str(exc)) from None
    return derive_seed(seed, exploration), database


@pytest.fixture
def kit_exploration() -> int:
    """The fault-machine exploration a check runs: 0 (the session's seed) unless the session runs several."""
    return 0


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A fault-machine check runs once per exploration of this shard when the run has more than one
    (workers x shards), each a test of its own (``[exploration<i>]``) that pytest-xdist can send to a core."""
    if "kit_exploration" not in metafunc.fixturenames:
        return
    workers, shard = swarm_settings(metafunc.config)
    if workers * shard.count > 1:
        from kit.swarm import exploration_indices

        indices = exploration_indices(workers, shard)
        metafunc.parametrize("kit_exploration", indices, ids=[f"exploration{i}" for i in indices])


def _select_part_and_shard(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the fixed checks of this shard (round-robin over sorted node ids) and the part asked for;
    order the explorations by index, so pytest-xdist hands each worker its own."""
    part = config.getoption("kit_part", None) or "all"
    workers, shard = swarm_settings(config)
    if part == "all" and shard.whole and workers == 1:
        return

    def exploration(item: pytest.Item) -> int | None:
        callspec = getattr(item, "callspec", None)
        if "kit_exploration" not in getattr(item, "fixturenames", ()):
            return None
        return int(callspec.params.get("kit_exploration", 0)) if callspec is not None else 0

    fixed = sorted(item.nodeid for item in items if exploration(item) is None)
    mine = {nodeid for position, nodeid in enumerate(fixed) if _in_shard(position, shard)}
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        index = exploration(item)
        wanted = (part != "machines" and item.nodeid in mine) if index is None else part != "suite"
        (kept if wanted else dropped).append(item)
    kept.sort(key=lambda item: (exploration(item) is not None, exploration(item) or 0))
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = kept


def _in_shard(position: int, shard: Shard) -> bool:
    from kit.swarm import shard_of

    return shard_of(position, shard)


def machine_mode(config: pytest.Config, backend: Backend) -> str:
    """``reference`` or ``model-free``: the fault machine this session runs against ``backend``."""
    from kit.machines.choice import choose_machine

    requested = config.getoption("kit_machine", None) or os.environ.get("KIT_MACHINE") or "auto"
    try:
        return choose_machine(backend, str(requested))
    except ConfigurationError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = [f"kit seed: {session_seed(config)} (replay this session's machines with --kit-seed {session_seed(config)})"]
    name = config.getoption("kit_backend")
    if name:
        lines.append(f"kit backend: {name}")
    return lines


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tag conformance checks with their id, area and guarantee (kept in reports and JUnit); run the fault
    machines last, so the quick fixed checks give their verdicts first; keep only this shard's and part's."""
    from kit.conformance._harness import AreaChecks, check_id

    def machines_last(item: pytest.Item) -> bool:
        cls, function = getattr(item, "cls", None), getattr(item, "function", None)
        return (cls is not None and function is not None and issubclass(cls, AreaChecks)
                and check_id(cls, function.__name__).startswith("machines."))

    items.sort(key=machines_last)

    for item in items:
        cls = getattr(item, "cls", None)
        if cls is None or not issubclass(cls, AreaChecks):
            continue
        function = getattr(item, "function", None)
        if function is None:
            continue
        cid = check_id(cls, function.__name__)
        guarantee = " ".join((inspect.getdoc(function) or "").split("\n\n", 1)[0].split())  # first paragraph
        item.extra_keyword_matches.add(cid.split(".", 1)[0])  # `-k claims` selects an area
        item.user_properties.append(("kit_check", cid))
        item.user_properties.append(("kit_guarantee", guarantee))
    _select_part_and_shard(config, items)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    props = dict(item.user_properties)
    if "kit_check" in props:
        report.sections.append(
            ("kit guarantee violated", f"{props['kit_check']}: {props.get('kit_guarantee', '')}")
        )
