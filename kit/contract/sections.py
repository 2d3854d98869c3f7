"""Where each check's promise is written: the section of ``docs/CONTRACT.md`` it proves.

A failing check, a report's failure entry and a stress verdict name the section (``docs/CONTRACT.md
section 3.4 (Decision claims)``), so the reader goes from a verdict to the text that makes it a promise.
The kit's tests hold this table and the document's headings together.
"""

from __future__ import annotations

import re

__all__ = ["AREA_SECTIONS", "CONTRACT_PATH", "CONTRACT_VERSION", "INVARIANT_SECTION", "invariant_section",
           "section_of"]

CONTRACT_VERSION = "1.2"
"""The version of ``docs/CONTRACT.md`` this kit checks (its first line says the same)."""

CONTRACT_PATH = "docs/CONTRACT.md"

#: check area -> (section number, heading as written in the document, without its number)
AREA_SECTIONS: dict[str, tuple[str, str]] = {
    "keys_and_payloads": ("1", "Entities"),
    "clock": ("2", "The store clock"),
    "schema": ("3.1", "Schema lifecycle"),
    "definitions": ("3.2", "Definitions"),
    "runs": ("3.3", "Runs"),
    "claims": ("3.4", "Decision claims"),
    "commit": ("3.4", "Decision claims"),
    "commands": ("3.5", "Commands"),
    "signals": ("3.6", "Signals"),
    "timers": ("3.7", "Timers"),
    "tenancy": ("3.8", "Tenancy"),
    "unit_of_work": ("3.9", "Unit of work"),
    "machines": ("6", "Invariants"),
    "queue": ("7", "The queue profile"),
    "queue_machines": ("7", "The queue profile"),
}

INVARIANT_SECTION = "6"
"""Stress verdicts are invariants 6.1 to 6.10."""


def section_of(check: str) -> str:
    """The section a check (``area.name`` or its area) proves, e.g. ``docs/CONTRACT.md section 3.4 (Decision
    claims)``; a stress verdict ``stress.invariant_03_...`` cites section 6.3; an area the table does not know
    is cited as the whole document."""
    area, _, name = check.partition(".")
    invariant = re.match(r"invariant_(\d+)_", name)
    if area == "stress" and invariant:  # kit stress: one verdict per invariant of section 6
        return f"{CONTRACT_PATH} section {INVARIANT_SECTION}.{int(invariant.group(1))} (Invariants)"
    known = AREA_SECTIONS.get(area)
    if known is None:
        return CONTRACT_PATH
    number, title = known
    return f"{CONTRACT_PATH} section {number} ({title})"


def invariant_section(invariant: int) -> str:
    """``CONTRACT.md 6.N``: how a stress verdict cites its invariant."""
    return f"CONTRACT.md {INVARIANT_SECTION}.{invariant}"
