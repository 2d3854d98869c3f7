"""SQL Server helpers behind :mod:`adapters.mssql`: ODBC plumbing, the dialect, the store.

Split so each piece stays small and importable without a driver: nothing here
imports pyodbc at module level (it needs the native ``libodbc.so.2``), so the
adapter, its SQL and its static proof load on machines without unixODBC.
"""

from adapters._mssql.dialect import MssqlDialect
from adapters._mssql.store import MAX_CLAIM_BATCH, MssqlStore

__all__ = ["MAX_CLAIM_BATCH", "MssqlDialect", "MssqlStore"]
