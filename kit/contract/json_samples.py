"""JSON numbers at every boundary a store can get wrong, shared by the suite and the fault machines.

What the contract promises (CONTRACT.md section 1, "Payloads"): every JSON
integer round-trips as the same integer, whatever its size (beyond 64 bits
too), every float as a float of the same value, every boolean as a boolean.
The built-in adapters keep that by storing JSON as text (SQLite ``TEXT``,
MariaDB/MySQL ``LONGTEXT``, SQL Server ``NVARCHAR(MAX)``) or as PostgreSQL
``jsonb``, whose numbers are arbitrary-precision ``numeric``; a float at or
beyond 1e16 is written with a ``.0`` fraction so ``jsonb`` keeps it a float
(:func:`kit.contract.validation.encode_json`). MySQL 8's binary ``JSON`` type
would turn integers beyond 64 bits into doubles, which is why no adapter uses
it. JSON has one zero: ``-0.0`` may come back as ``0.0`` (``numeric`` has no
negative zero), but a float.
"""

from __future__ import annotations

__all__ = ["INTEGER_BOUNDARIES", "INTEGRAL_FLOATS", "NUMBER_BOUNDARIES"]


def _around(n: int) -> tuple[int, ...]:
    return (n - 1, n, n + 1, -n + 1, -n, -n - 1)


INTEGER_BOUNDARIES: tuple[int, ...] = (
    0, 1, -1,
    *_around(2**31),  # int32
    *_around(2**53),  # the last integers a double holds exactly
    *_around(2**63),  # int64
    2**64 - 1, 2**64, 2**64 + 1,  # uint64 and just beyond
    10**30, -(10**30),
)
"""Integers where a store's int32, double, int64 or uint64 representation breaks."""

INTEGRAL_FLOATS: tuple[float, ...] = (1.0, -1.0, 0.0, -0.0, 2.0**53, 1e16, 2.0**63, 2.0**64, 1e300, -1.5e300)
"""Floats with an integral value: a store must not hand them back as integers."""

NUMBER_BOUNDARIES: tuple[int | float, ...] = (*INTEGER_BOUNDARIES, *INTEGRAL_FLOATS)
