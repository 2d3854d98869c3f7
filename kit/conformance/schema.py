"""Schema lifecycle: migrate is idempotent and concurrent-safe; verify_schema fails closed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from kit.conformance._harness import TENANT, AreaChecks, Threads, fresh_database, requires
from kit.contract import Capability, Database, Promise, SchemaError, Storage, StorageError
from kit.faults import InjectedFault
from kit.migrate import Migration

__all__ = ["SchemaChecks"]

#: A migration every SQL dialect accepts; used as "one more file than the code knows".
PROBE = Migration(900, "kit_probe", "CREATE TABLE kit_probe_900 (id INTEGER NOT NULL PRIMARY KEY);\n")


@fresh_database  # absent, partial, newer schemas: each check needs a database nothing migrated yet
class SchemaChecks(AreaChecks):
    area = "schema"

    @staticmethod
    def _shipped(database: Database) -> list[Migration]:
        """The adapter's own migrations, read back through a store it opens."""
        store = database.open(TENANT)
        try:
            return [Migration(m.version, m.name, m.sql) for m in store.migrations]
        finally:
            store.close()

    def test_migrate_then_verify_passes(self, store: Storage) -> None:
        """After migrate(), verify_schema() accepts the schema."""
        store.verify_schema()

    def test_migrate_is_idempotent(self, store: Storage) -> None:
        """A second migrate() applies nothing and the schema still verifies."""
        assert store.migrate() == []
        store.verify_schema()

    @requires(Promise.SCHEMA_CHECKSUMS)
    def test_verify_fails_closed_on_absent_schema(self, open_store: Callable[..., Storage]) -> None:
        """verify_schema() raises 'absent' on a database nothing was migrated into."""
        store = open_store(migrate=False)
        with pytest.raises(SchemaError) as info:
            store.verify_schema()
        assert info.value.problem == "absent"

    @requires(Promise.SCHEMA_CHECKSUMS)
    def test_verify_fails_closed_on_partial_schema(self, database: Database, open_store: Callable[..., Storage]) -> None:
        """verify_schema() raises 'partial' when the code knows a migration the database lacks."""
        shipped = self._shipped(database)
        open_store(migrations=shipped)
        with pytest.raises(SchemaError) as info:
            open_store(migrate=False, migrations=[*shipped, PROBE]).verify_schema()
        assert info.value.problem == "partial"

    @requires(Promise.SCHEMA_CHECKSUMS)
    def test_verify_fails_closed_on_newer_schema(self, database: Database, open_store: Callable[..., Storage]) -> None:
        """verify_schema() raises 'newer' when the database has a migration the code does not know."""
        shipped = self._shipped(database)
        open_store(migrations=[*shipped, PROBE])
        with pytest.raises(SchemaError) as info:
            open_store(migrate=False, migrations=shipped).verify_schema()
        assert info.value.problem == "newer"

    @requires(Promise.SCHEMA_CHECKSUMS)
    def test_verify_fails_closed_on_tampered_migration(self, database: Database, open_store: Callable[..., Storage]) -> None:
        """verify_schema() raises 'tampered' when an applied file's checksum changed."""
        shipped = self._shipped(database)
        open_store(migrations=shipped)
        changed = [*shipped[:-1], replace(shipped[-1], sql=shipped[-1].sql + "\n-- edited after applying\n")]
        with pytest.raises(SchemaError) as info:
            open_store(migrate=False, migrations=changed).verify_schema()
        assert info.value.problem == "tampered"

    @requires(Capability.STATEMENT_FAULTS, Promise.SCHEMA_CHECKSUMS)
    def test_failed_migration_is_not_recorded_and_can_be_rerun(
        self, database: Database, open_store: Callable[..., Storage]
    ) -> None:
        """A migration that fails is not recorded: the schema fails verification until migrate() succeeds."""
        shipped = self._shipped(database)
        open_store(migrations=shipped)
        wanted = [*shipped, PROBE]
        fired: list[str] = []

        def fail_probe(statement: str) -> None:
            if "kit_probe" in statement and not fired:
                fired.append(statement)
                raise InjectedFault(f"injected fault before: {statement[:60]}")

        with pytest.raises(StorageError):
            open_store(migrate=False, migrations=wanted, statement_hook=fail_probe).migrate()
        assert fired, "the probe migration never ran a statement"
        with pytest.raises(SchemaError) as info:
            open_store(migrate=False, migrations=wanted).verify_schema()
        assert info.value.problem == "partial"
        assert open_store(migrate=False, migrations=wanted).migrate() == ["900_kit_probe"]
        open_store(migrate=False, migrations=wanted).verify_schema()

    @requires(Capability.CONCURRENT_CONNECTIONS, Promise.SCHEMA_CHECKSUMS)
    def test_concurrent_migrate_applies_each_file_once(self, database: Database, open_store: Callable[..., Storage]) -> None:
        """Two processes migrating at once both succeed and every file is applied exactly once."""
        shipped = self._shipped(database)
        stores = [open_store(migrate=False) for _ in range(3)]
        applied = Threads.run([s.migrate for s in stores])
        names = sorted(name for batch in applied for name in batch)
        assert names == sorted(f"{m.version:03d}_{m.name}" for m in shipped)
        stores[0].verify_schema()
