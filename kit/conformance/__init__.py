"""The shared conformance suite, written against the protocol and capabilities only.

An adapter author gets every check by subclassing :class:`ConformanceSuite`
in a test module of their own and supplying their adapter::

    import pytest
    from kit.conformance import ConformanceSuite

    class TestMyStore(ConformanceSuite):
        @pytest.fixture(scope="class")
        @classmethod
        def kit_backend(cls):
            return MyBackend()          # implements kit.contract.Backend

Or, without writing a class, run ``kit check package.module:factory``.
Each area is also exported on its own (``ClaimChecks``, ``CommitChecks``...)
for authors who want only part of the suite.
"""

from kit.conformance._harness import LEASE, TENANT, AreaChecks, Threads, check_id, requires
from kit.conformance.acknowledged_writes import AcknowledgedWriteChecks
from kit.conformance.claims import ClaimChecks
from kit.conformance.clock import ClockChecks
from kit.conformance.commands import CommandChecks
from kit.conformance.commit import CommitChecks
from kit.conformance.definition_versions import DefinitionVersionChecks
from kit.conformance.definitions import DefinitionChecks
from kit.conformance.keys_and_payloads import KeyAndPayloadChecks
from kit.conformance.machines import MachineChecks
from kit.conformance.payload_limits import PayloadLimitChecks
from kit.conformance.runs import RunChecks
from kit.conformance.schema import SchemaChecks
from kit.conformance.signals import SignalChecks
from kit.conformance.stored_values import StoredValueChecks
from kit.conformance.tenancy import TenancyChecks
from kit.conformance.timers import TimerChecks
from kit.conformance.unit_of_work import UnitOfWorkChecks

__all__ = [
    "AREAS",
    "LEASE",
    "TENANT",
    "AcknowledgedWriteChecks",
    "AreaChecks",
    "ClaimChecks",
    "ClockChecks",
    "CommandChecks",
    "CommitChecks",
    "ConformanceSuite",
    "DefinitionChecks",
    "DefinitionVersionChecks",
    "KeyAndPayloadChecks",
    "MachineChecks",
    "PayloadLimitChecks",
    "RunChecks",
    "SchemaChecks",
    "SignalChecks",
    "StoredValueChecks",
    "TenancyChecks",
    "Threads",
    "TimerChecks",
    "UnitOfWorkChecks",
    "check_id",
    "requires",
]

#: Every contract area, in the order reports list them.
AREAS: tuple[type[AreaChecks], ...] = (
    SchemaChecks,
    ClockChecks,
    DefinitionChecks,
    DefinitionVersionChecks,
    RunChecks,
    ClaimChecks,
    CommitChecks,
    CommandChecks,
    SignalChecks,
    TimerChecks,
    TenancyChecks,
    UnitOfWorkChecks,
    AcknowledgedWriteChecks,
    KeyAndPayloadChecks,
    PayloadLimitChecks,
    StoredValueChecks,
    MachineChecks,
)


class ConformanceSuite(*AREAS):  # type: ignore[misc]
    """Every conformance check. Subclass it and provide the ``kit_backend`` fixture."""

    area = "conformance"
