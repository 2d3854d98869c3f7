"""Listing a definition's versions: exact name, code-point order, nothing of another tenant."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kit.conformance._harness import AreaChecks, requires
from kit.contract import InvalidArgument, Promise, Storage, digest_of

__all__ = ["DefinitionVersionChecks"]

#: Versions whose code-point order differs from numeric, case-insensitive, accent-folding, UTF-16
#: code-unit and padded orders: "10" < "2", "Z" < "a", "e"+U+0301 < "é", U+FFFD < U+1F600.
VERSIONS = ("2", "10", "1", "a", "Z", "\u00e9", "e\u0301", "\U0001f600", "\ufffd", "1 ", "v1.0", "v1.0.1")


@requires(Promise.DEFINITIONS)
class DefinitionVersionChecks(AreaChecks):
    area = "definitions"

    def test_versions_are_listed_in_code_point_order(self, store: Storage) -> None:
        """list_definition_versions(name) returns every stored version of that name, as the stored rows, in
        code-point order of the version (not numeric, case-insensitive, accent-folded or UTF-16 order)."""
        stored = {version: store.ensure_definition("wf", version, digest_of(version.encode()), version.encode())
                  for version in VERSIONS}
        listed = store.list_definition_versions("wf")
        assert [d.version for d in listed] == sorted(VERSIONS), "versions are not in code-point order"
        assert listed == [stored[version] for version in sorted(VERSIONS)], "a listed row differs from the stored"

    def test_the_name_matches_exactly(self, store: Storage) -> None:
        """The name is compared byte-exactly: no LIKE pattern ('%', '_'), no case or accent folding, no
        trailing-space padding; each name lists only its own versions."""
        names = ("wf", "WF", "wf ", "w_", "wx", "w%", "\u00e9", "e\u0301")
        for i, name in enumerate(names):
            body = f"{name}-{i}".encode()
            store.ensure_definition(name, "1", digest_of(body), body)
        for i, name in enumerate(names):
            listed = store.list_definition_versions(name)
            assert [(d.name, d.body) for d in listed] == [(name, f"{name}-{i}".encode())], \
                f"listing {name!r} matched {[d.name for d in listed]}"
        for pattern in ("w%", "%", "w_", "_f"):
            assert all(d.name == pattern for d in store.list_definition_versions(pattern)), \
                f"{pattern!r} was used as a pattern"

    def test_an_unknown_name_lists_nothing(self, store: Storage) -> None:
        """An unknown name gives an empty list, not an error; an invalid name is refused with InvalidArgument."""
        store.ensure_definition("wf", "1", digest_of(b"x"), b"x")
        assert store.list_definition_versions("ghost") == []
        with pytest.raises(InvalidArgument):
            store.list_definition_versions("")

    @requires(Promise.TENANCY)
    def test_versions_are_listed_per_tenant(self, open_store: Callable[..., Storage]) -> None:
        """Another tenant's versions of the same name are never listed."""
        mine, theirs = open_store("tenant-a"), open_store("tenant-b")
        mine.ensure_definition("wf", "1", digest_of(b"a1"), b"a1")
        theirs.ensure_definition("wf", "1", digest_of(b"b1"), b"b1")
        theirs.ensure_definition("wf", "2", digest_of(b"b2"), b"b2")
        assert [(d.version, d.body) for d in mine.list_definition_versions("wf")] == [("1", b"a1")]
        assert [(d.version, d.body) for d in theirs.list_definition_versions("wf")] == [("1", b"b1"), ("2", b"b2")]
