"""Definitions: insert-if-absent, never overwritten, also when two first calls race."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from functools import partial

import pytest

from kit.conformance._harness import AreaChecks, Threads, requires
from kit.contract import Capability, InvalidArgument, Promise, Storage, digest_of

__all__ = ["DefinitionChecks"]


@requires(Promise.DEFINITIONS)
class DefinitionChecks(AreaChecks):
    area = "definitions"

    def test_ensure_inserts_and_returns_the_row(self, store: Storage) -> None:
        """ensure_definition() on an absent (name, version) stores it and returns the stored row."""
        body = b"(module)"
        row = store.ensure_definition("orders", "1", digest_of(body), body)
        assert (row.name, row.version, row.digest, row.body) == ("orders", "1", digest_of(body), body)
        assert store.get_definition("orders", "1") == row

    def test_ensure_never_overwrites(self, store: Storage) -> None:
        """A second ensure_definition() with another body returns the original row, untouched."""
        first = store.ensure_definition("orders", "1", digest_of(b"v1"), b"v1")
        again = store.ensure_definition("orders", "1", digest_of(b"CHANGED"), b"CHANGED")
        assert again == first
        assert store.get_definition("orders", "1") == first

    def test_ensure_is_repeatable(self, store: Storage) -> None:
        """Ensuring the same definition twice returns the same row (same created_at)."""
        first = store.ensure_definition("orders", "1", digest_of(b"v1"), b"v1")
        self.let_time_pass(store, timedelta(seconds=5))
        assert store.ensure_definition("orders", "1", digest_of(b"v1"), b"v1") == first

    def test_get_absent_definition_is_none(self, store: Storage) -> None:
        """get_definition() of an unknown (name, version) returns nothing."""
        assert store.get_definition("nope", "1") is None

    def test_versions_are_distinct(self, store: Storage) -> None:
        """Two versions of one name are two definitions."""
        a = store.ensure_definition("orders", "1", digest_of(b"a"), b"a")
        b = store.ensure_definition("orders", "2", digest_of(b"b"), b"b")
        assert store.get_definition("orders", "1") == a and store.get_definition("orders", "2") == b

    def test_names_are_byte_exact(self, store: Storage) -> None:
        """Definition names differing only in case are different definitions."""
        store.ensure_definition("Orders", "1", digest_of(b"upper"), b"upper")
        lower = store.ensure_definition("orders", "1", digest_of(b"lower"), b"lower")
        assert lower.body == b"lower"
        found = store.get_definition("Orders", "1")
        assert found is not None and found.body == b"upper"

    def test_body_bytes_round_trip(self, store: Storage) -> None:
        """A definition body holding every byte value (NUL included) comes back byte for byte."""
        body = bytes(range(256)) * 64
        store.ensure_definition("bin", "1", digest_of(body), body)
        found = store.get_definition("bin", "1")
        assert found is not None and found.body == body

    def test_digest_must_be_sha256_of_body(self, store: Storage) -> None:
        """A digest that is not the sha256 of the body is refused before anything is stored."""
        with pytest.raises(InvalidArgument):
            store.ensure_definition("orders", "1", digest_of(b"other"), b"body")
        assert store.get_definition("orders", "1") is None

    @requires(Capability.CONCURRENT_CONNECTIONS)
    def test_racing_first_calls_store_one_row(self, open_store: Callable[..., Storage]) -> None:
        """Concurrent first ensure_definition() calls store exactly one row and all callers get it."""
        stores = [open_store() for _ in range(4)]
        bodies = [f"body {i}".encode() for i in range(len(stores))]
        rows = Threads.run([
            partial(s.ensure_definition, "race", "1", digest_of(b), b)
            for s, b in zip(stores, bodies)
        ])
        assert len({r.digest for r in rows}) == 1, f"callers saw different rows: {rows}"
        assert stores[0].get_definition("race", "1") == rows[0]
