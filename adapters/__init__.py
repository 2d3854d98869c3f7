"""The kit's adapters: SQLite (embedded default), PostgreSQL, MySQL/MariaDB, SQL Server."""
