-- The durable-workflow storage schema for SQLite (kit contract v1).
--
-- Conventions shared by every dialect of the kit:
--   * time is INTEGER microseconds since the Unix epoch, UTC (exact, no time zones);
--   * flags are 0/1 integers;
--   * JSON is stored as text and checked with json_valid;
--   * key columns compare byte-exactly (SQLite's default BINARY collation);
--   * due_at is when a row becomes claimable (NULL: never by time); the claim
--     indexes serve the claim's WHERE and ORDER BY.

CREATE TABLE kit_definitions (
    tenant_id  TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    version    TEXT    NOT NULL,
    digest     TEXT    NOT NULL,
    body       BLOB    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, name, version)
);

CREATE TABLE kit_runs (
    tenant_id        TEXT    NOT NULL,
    run_id           TEXT    NOT NULL,
    def_name         TEXT    NOT NULL,
    def_version      TEXT    NOT NULL,
    def_digest       TEXT    NOT NULL,
    status           TEXT    NOT NULL CHECK (status IN ('pending', 'running', 'blocked', 'completed', 'failed', 'cancelled')),
    revision         INTEGER NOT NULL,
    claim_owner      TEXT,
    claim_generation INTEGER NOT NULL,
    claim_expires_at INTEGER,
    wake_at          INTEGER,
    due_at           INTEGER,
    wakeup_pending   INTEGER NOT NULL CHECK (wakeup_pending IN (0, 1)),
    cancel_requested INTEGER NOT NULL CHECK (cancel_requested IN (0, 1)),
    cancel_reason    TEXT,
    input            TEXT    NOT NULL CHECK (json_valid(input)),
    output           TEXT    NOT NULL CHECK (json_valid(output)),
    error            TEXT    NOT NULL CHECK (json_valid(error)),
    idempotency_key  TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, run_id)
);
CREATE UNIQUE INDEX kit_runs_idempotency ON kit_runs (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX kit_runs_due ON kit_runs (tenant_id, due_at, run_id) WHERE due_at IS NOT NULL;

CREATE TABLE kit_events (
    tenant_id     TEXT    NOT NULL,
    run_id        TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    kind          TEXT    NOT NULL,
    operation_key TEXT,
    payload       TEXT    NOT NULL CHECK (json_valid(payload)),
    revision      INTEGER NOT NULL,
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, run_id, seq)
);
CREATE UNIQUE INDEX kit_events_operation ON kit_events (tenant_id, run_id, operation_key) WHERE operation_key IS NOT NULL;

CREATE TABLE kit_commands (
    command_id       INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id        TEXT    NOT NULL,
    run_id           TEXT    NOT NULL,
    operation_key    TEXT    NOT NULL,
    name             TEXT    NOT NULL,
    queue            TEXT    NOT NULL,
    input            TEXT    NOT NULL CHECK (json_valid(input)),
    status           TEXT    NOT NULL CHECK (status IN ('pending', 'claimed', 'completed', 'failed', 'cancelled')),
    attempt          INTEGER NOT NULL,
    max_attempts     INTEGER NOT NULL,
    not_before       INTEGER NOT NULL,
    claim_owner      TEXT,
    claim_generation INTEGER NOT NULL,
    claim_expires_at INTEGER,
    due_at           INTEGER,
    result           TEXT    NOT NULL CHECK (json_valid(result)),
    error            TEXT    NOT NULL CHECK (json_valid(error)),
    consumed         INTEGER NOT NULL CHECK (consumed IN (0, 1)),
    created_at       INTEGER NOT NULL
);
CREATE UNIQUE INDEX kit_commands_operation ON kit_commands (tenant_id, run_id, operation_key);
CREATE INDEX kit_commands_due ON kit_commands (tenant_id, due_at, command_id) WHERE due_at IS NOT NULL;

CREATE TABLE kit_signals (
    signal_id         INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id         TEXT    NOT NULL,
    run_id            TEXT    NOT NULL,
    name              TEXT    NOT NULL,
    payload           TEXT    NOT NULL CHECK (json_valid(payload)),
    dedup_key         TEXT    NOT NULL,
    status            TEXT    NOT NULL CHECK (status IN ('pending', 'consumed')),
    consumed_revision INTEGER,
    sent_at           INTEGER NOT NULL
);
CREATE UNIQUE INDEX kit_signals_dedup ON kit_signals (tenant_id, run_id, dedup_key);

CREATE TABLE kit_timers (
    timer_id      INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id     TEXT    NOT NULL,
    run_id        TEXT    NOT NULL,
    operation_key TEXT    NOT NULL,
    fire_at       INTEGER NOT NULL,
    status        TEXT    NOT NULL CHECK (status IN ('scheduled', 'fired', 'consumed', 'cancelled')),
    created_at    INTEGER NOT NULL
);
CREATE UNIQUE INDEX kit_timers_operation ON kit_timers (tenant_id, run_id, operation_key);
CREATE INDEX kit_timers_due ON kit_timers (tenant_id, status, fire_at, timer_id);
