"""Shared machinery of the SQL adapters: one store written once, dialects that differ."""

from adapters._sql.dialect import Dialect
from adapters._sql.store import CORE_TABLES, SqlStore

__all__ = ["CORE_TABLES", "Dialect", "SqlStore"]
