-- The durable-workflow storage schema for SQL Server 2022+ (kit contract v1), in T-SQL.
--
-- Conventions shared by every dialect of the kit:
--   * time is BIGINT microseconds since the Unix epoch, UTC (exact; never DATETIME,
--     which rounds to 1/300 s, and no session time zone is ever involved);
--   * flags are 0/1 (BIT, the 0/1 integer type of SQL Server);
--   * JSON is text: NVARCHAR(MAX) checked with ISJSON(c, VALUE) = 1. VALUE matters:
--     plain ISJSON(c) accepts only objects and arrays, so the scalar JSON values the
--     kit stores (null, 1, "x") would be refused (VALUE needs SQL Server 2022);
--   * due_at is when a row becomes claimable (NULL: never by time); the claim
--     indexes serve the WHERE and ORDER BY of the claims.
--
-- SQL Server specifics, and why:
--   * Every text column is NVARCHAR: pyodbc sends Python str as NVARCHAR, so a
--     comparison never converts the column (an implicit conversion would turn the
--     index seeks the locking depends on into scans).
--   * Key and id columns are COLLATE Latin1_General_100_BIN2: the default collation of a
--     server is usually case- and accent-insensitive, under which Key = key and
--     U+00E9 = e + U+0301 would collide on a unique index (DIALECTS pitfall 19).
--     BIN2 compares code points (UTF-16 code units for characters beyond the BMP).
--   * Sizes are in UTF-16 code units, twice the limits of the contract in code points
--     (a character beyond the BMP takes two): tenant 64 -> 128, run id 128 -> 256,
--     keys 255 -> 510, names 200 -> 400.
--   * Nullable unique keys (idempotency_key, event operation_key) are filtered unique
--     indexes: SQL Server treats NULLs as equal in UNIQUE constraints, so a plain
--     unique index would allow one run without an idempotency key per tenant.
--   * The claim tables (runs, commands) allow no page locks and no lock escalation:
--     READPAST skips locked rows, not locked pages or tables (DIALECTS pitfall 11),
--     so a page or table lock would make concurrent claimers queue.
--   * The primary key of kit_definitions is NONCLUSTERED: its widest key (128 + 400 + 400
--     code units = 1856 bytes) exceeds the 900-byte clustered-key limit; nonclustered
--     keys may take 1700 bytes. Keys made mostly of characters beyond the BMP can
--     still exceed an index limit; SQL Server then refuses the row (error 1946),
--     never truncates it.
--   * No GO separators, no BEGIN...END blocks, no question marks anywhere (an ODBC
--     driver may take one for a parameter marker) and no quotes or braces in comments
--     (nothing for a driver to misread as a literal or an escape): the runner of the kit
--     splits this file on semicolons (sqlparse) and runs every statement, unparameterised,
--     in one transaction.

CREATE TABLE kit_definitions (
    tenant_id  NVARCHAR(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
    name       NVARCHAR(400) COLLATE Latin1_General_100_BIN2 NOT NULL,
    version    NVARCHAR(400) COLLATE Latin1_General_100_BIN2 NOT NULL,
    digest     NVARCHAR(64)  COLLATE Latin1_General_100_BIN2 NOT NULL,
    body       VARBINARY(MAX) NOT NULL,
    created_at BIGINT NOT NULL,
    CONSTRAINT kit_definitions_pk PRIMARY KEY NONCLUSTERED (tenant_id, name, version)
);

CREATE TABLE kit_runs (
    tenant_id        NVARCHAR(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
    run_id           NVARCHAR(256) COLLATE Latin1_General_100_BIN2 NOT NULL,
    def_name         NVARCHAR(400) COLLATE Latin1_General_100_BIN2 NOT NULL,
    def_version      NVARCHAR(400) COLLATE Latin1_General_100_BIN2 NOT NULL,
    def_digest       NVARCHAR(64)  COLLATE Latin1_General_100_BIN2 NOT NULL,
    status           NVARCHAR(16)  COLLATE Latin1_General_100_BIN2 NOT NULL
        CHECK (status IN ('pending', 'running', 'blocked', 'completed', 'failed', 'cancelled')),
    revision         BIGINT NOT NULL,
    claim_owner      NVARCHAR(256) COLLATE Latin1_General_100_BIN2 NULL,
    claim_generation BIGINT NOT NULL,
    claim_expires_at BIGINT NULL,
    wake_at          BIGINT NULL,
    due_at           BIGINT NULL,
    wakeup_pending   BIT NOT NULL,
    cancel_requested BIT NOT NULL,
    cancel_reason    NVARCHAR(MAX) NULL,
    input            NVARCHAR(MAX) NOT NULL CHECK (ISJSON(input, VALUE) = 1),
    output           NVARCHAR(MAX) NOT NULL CHECK (ISJSON(output, VALUE) = 1),
    error            NVARCHAR(MAX) NOT NULL CHECK (ISJSON(error, VALUE) = 1),
    idempotency_key  NVARCHAR(510) COLLATE Latin1_General_100_BIN2 NULL,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    CONSTRAINT kit_runs_pk PRIMARY KEY CLUSTERED (tenant_id, run_id) WITH (ALLOW_PAGE_LOCKS = OFF)
);
CREATE UNIQUE NONCLUSTERED INDEX kit_runs_idempotency ON kit_runs (tenant_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- Not filtered: the range seek of the claim on due_at skips the NULLs (they sort first), and the
-- optimizer never has to prove that a parameterised predicate implies an index filter.
CREATE NONCLUSTERED INDEX kit_runs_due ON kit_runs (tenant_id, due_at, run_id) WITH (ALLOW_PAGE_LOCKS = OFF);
ALTER TABLE kit_runs SET (LOCK_ESCALATION = DISABLE);

CREATE TABLE kit_events (
    tenant_id     NVARCHAR(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
    run_id        NVARCHAR(256) COLLATE Latin1_General_100_BIN2 NOT NULL,
    seq           BIGINT NOT NULL,
    kind          NVARCHAR(400) COLLATE Latin1_General_100_BIN2 NOT NULL,
    operation_key NVARCHAR(510) COLLATE Latin1_General_100_BIN2 NULL,
    payload       NVARCHAR(MAX) NOT NULL CHECK (ISJSON(payload, VALUE) = 1),
    revision      BIGINT NOT NULL,
    created_at    BIGINT NOT NULL,
    CONSTRAINT kit_events_pk PRIMARY KEY CLUSTERED (tenant_id, run_id, seq)
);
CREATE UNIQUE NONCLUSTERED INDEX kit_events_operation ON kit_events (tenant_id, run_id, operation_key)
    WHERE operation_key IS NOT NULL;

CREATE TABLE kit_commands (
    command_id       BIGINT IDENTITY(1, 1) NOT NULL,
    tenant_id        NVARCHAR(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
    run_id           NVARCHAR(256) COLLATE Latin1_General_100_BIN2 NOT NULL,
    operation_key    NVARCHAR(510) COLLATE Latin1_General_100_BIN2 NOT NULL,
    name             NVARCHAR(400) COLLATE Latin1_General_100_BIN2 NOT NULL,
    queue            NVARCHAR(400) COLLATE Latin1_General_100_BIN2 NOT NULL,
    input            NVARCHAR(MAX) NOT NULL CHECK (ISJSON(input, VALUE) = 1),
    status           NVARCHAR(16)  COLLATE Latin1_General_100_BIN2 NOT NULL
        CHECK (status IN ('pending', 'claimed', 'completed', 'failed', 'cancelled')),
    attempt          INT NOT NULL,
    max_attempts     INT NOT NULL,
    not_before       BIGINT NOT NULL,
    claim_owner      NVARCHAR(256) COLLATE Latin1_General_100_BIN2 NULL,
    claim_generation BIGINT NOT NULL,
    claim_expires_at BIGINT NULL,
    due_at           BIGINT NULL,
    result           NVARCHAR(MAX) NOT NULL CHECK (ISJSON(result, VALUE) = 1),
    error            NVARCHAR(MAX) NOT NULL CHECK (ISJSON(error, VALUE) = 1),
    consumed         BIT NOT NULL,
    created_at       BIGINT NOT NULL,
    CONSTRAINT kit_commands_pk PRIMARY KEY CLUSTERED (command_id) WITH (ALLOW_PAGE_LOCKS = OFF)
);
CREATE UNIQUE NONCLUSTERED INDEX kit_commands_operation ON kit_commands (tenant_id, run_id, operation_key)
    WITH (ALLOW_PAGE_LOCKS = OFF);
-- queue is included so the claim filters queues in the index seek itself, never locking
-- (UPDLOCK holds to commit) the rows of other queues it would only reject.
CREATE NONCLUSTERED INDEX kit_commands_due ON kit_commands (tenant_id, due_at, command_id)
    INCLUDE (queue) WITH (ALLOW_PAGE_LOCKS = OFF);
ALTER TABLE kit_commands SET (LOCK_ESCALATION = DISABLE);

CREATE TABLE kit_signals (
    signal_id         BIGINT IDENTITY(1, 1) NOT NULL,
    tenant_id         NVARCHAR(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
    run_id            NVARCHAR(256) COLLATE Latin1_General_100_BIN2 NOT NULL,
    name              NVARCHAR(400) COLLATE Latin1_General_100_BIN2 NOT NULL,
    payload           NVARCHAR(MAX) NOT NULL CHECK (ISJSON(payload, VALUE) = 1),
    dedup_key         NVARCHAR(510) COLLATE Latin1_General_100_BIN2 NOT NULL,
    status            NVARCHAR(16)  COLLATE Latin1_General_100_BIN2 NOT NULL
        CHECK (status IN ('pending', 'consumed')),
    consumed_revision BIGINT NULL,
    sent_at           BIGINT NOT NULL,
    CONSTRAINT kit_signals_pk PRIMARY KEY CLUSTERED (signal_id)
);
CREATE UNIQUE NONCLUSTERED INDEX kit_signals_dedup ON kit_signals (tenant_id, run_id, dedup_key);

CREATE TABLE kit_timers (
    timer_id      BIGINT IDENTITY(1, 1) NOT NULL,
    tenant_id     NVARCHAR(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
    run_id        NVARCHAR(256) COLLATE Latin1_General_100_BIN2 NOT NULL,
    operation_key NVARCHAR(510) COLLATE Latin1_General_100_BIN2 NOT NULL,
    fire_at       BIGINT NOT NULL,
    status        NVARCHAR(16)  COLLATE Latin1_General_100_BIN2 NOT NULL
        CHECK (status IN ('scheduled', 'fired', 'consumed', 'cancelled')),
    created_at    BIGINT NOT NULL,
    CONSTRAINT kit_timers_pk PRIMARY KEY CLUSTERED (timer_id)
);
CREATE UNIQUE NONCLUSTERED INDEX kit_timers_operation ON kit_timers (tenant_id, run_id, operation_key);
CREATE NONCLUSTERED INDEX kit_timers_due ON kit_timers (tenant_id, status, fire_at, timer_id);
