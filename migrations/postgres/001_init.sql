-- The durable-workflow storage schema for PostgreSQL (kit contract v1).
--
-- The same tables, keys and indexes as migrations/sqlite/001_init.sql, in
-- PostgreSQL's types. Unqualified names: the adapter's connections set
-- search_path to the one kit-owned schema (kit_<hex>) they work in.
--
-- Conventions shared by every dialect of the kit, and why they hold here:
--   * time is BIGINT microseconds since the Unix epoch, UTC. That is exactly
--     the contract's resolution (timestamptz is microseconds too, but goes
--     through the session TimeZone and the driver's tz conversion; integers
--     cannot be shifted or rounded by either, compare exactly, and let every
--     dialect share one row mapping). The store clock is written as
--     clock_timestamp() in integer microseconds by the adapter, never now().
--   * flags are SMALLINT 0/1 with CHECK constraints;
--   * JSON is jsonb (validated on write). jsonb normalises text (key order,
--     whitespace, number spelling such as 1.5e300): payloads round-trip as
--     values, which is what the contract promises; the adapter reads jsonb
--     back as text and parses it itself.
--   * every text column is COLLATE "C": keys compare and ORDER BY byte-exactly
--     (code point order in UTF-8), whatever the database's default collation
--     ("Key"/"key" and "é"/"e\u0301" stay distinct, run ids page in code point
--     order). Lengths are CHECKed against the contract's limits in characters.
--   * ids are BIGINT identities, handed out in insert order;
--   * due_at is when a row becomes claimable (NULL: never by time); the
--     partial claim indexes serve the claim's WHERE and ORDER BY, so a
--     SKIP LOCKED claimer walks the index in due order.

CREATE TABLE kit_definitions (
    tenant_id  TEXT COLLATE "C" NOT NULL CHECK (char_length(tenant_id) BETWEEN 1 AND 64),
    name       TEXT COLLATE "C" NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
    version    TEXT COLLATE "C" NOT NULL CHECK (char_length(version) BETWEEN 1 AND 200),
    digest     TEXT COLLATE "C" NOT NULL CHECK (digest ~ '^[0-9a-f]{64}$'),
    body       BYTEA  NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, name, version)
);

CREATE TABLE kit_runs (
    tenant_id        TEXT COLLATE "C" NOT NULL CHECK (char_length(tenant_id) BETWEEN 1 AND 64),
    run_id           TEXT COLLATE "C" NOT NULL CHECK (char_length(run_id) BETWEEN 1 AND 128),
    def_name         TEXT COLLATE "C" NOT NULL,
    def_version      TEXT COLLATE "C" NOT NULL,
    def_digest       TEXT COLLATE "C" NOT NULL,
    status           TEXT COLLATE "C" NOT NULL CHECK (status IN ('pending', 'running', 'blocked', 'completed', 'failed', 'cancelled')),
    revision         BIGINT   NOT NULL CHECK (revision >= 0),
    claim_owner      TEXT COLLATE "C" CHECK (char_length(claim_owner) BETWEEN 1 AND 128),
    claim_generation BIGINT   NOT NULL CHECK (claim_generation >= 0),
    claim_expires_at BIGINT,
    wake_at          BIGINT,
    due_at           BIGINT,
    wakeup_pending   SMALLINT NOT NULL CHECK (wakeup_pending IN (0, 1)),
    cancel_requested SMALLINT NOT NULL CHECK (cancel_requested IN (0, 1)),
    cancel_reason    TEXT COLLATE "C",
    input            JSONB    NOT NULL,
    output           JSONB    NOT NULL,
    error            JSONB    NOT NULL,
    idempotency_key  TEXT COLLATE "C" CHECK (char_length(idempotency_key) BETWEEN 1 AND 255),
    created_at       BIGINT   NOT NULL,
    updated_at       BIGINT   NOT NULL,
    PRIMARY KEY (tenant_id, run_id)
);
CREATE UNIQUE INDEX kit_runs_idempotency ON kit_runs (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX kit_runs_due ON kit_runs (tenant_id, due_at, run_id) WHERE due_at IS NOT NULL;

CREATE TABLE kit_events (
    tenant_id     TEXT COLLATE "C" NOT NULL,
    run_id        TEXT COLLATE "C" NOT NULL,
    seq           BIGINT NOT NULL CHECK (seq >= 1),
    kind          TEXT COLLATE "C" NOT NULL CHECK (char_length(kind) BETWEEN 1 AND 200),
    operation_key TEXT COLLATE "C" CHECK (char_length(operation_key) BETWEEN 1 AND 255),
    payload       JSONB  NOT NULL,
    revision      BIGINT NOT NULL,
    created_at    BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, run_id, seq)
);
CREATE UNIQUE INDEX kit_events_operation ON kit_events (tenant_id, run_id, operation_key) WHERE operation_key IS NOT NULL;

CREATE TABLE kit_commands (
    command_id       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id        TEXT COLLATE "C" NOT NULL,
    run_id           TEXT COLLATE "C" NOT NULL,
    operation_key    TEXT COLLATE "C" NOT NULL CHECK (char_length(operation_key) BETWEEN 1 AND 255),
    name             TEXT COLLATE "C" NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
    queue            TEXT COLLATE "C" NOT NULL CHECK (char_length(queue) BETWEEN 1 AND 200),
    input            JSONB    NOT NULL,
    status           TEXT COLLATE "C" NOT NULL CHECK (status IN ('pending', 'claimed', 'completed', 'failed', 'cancelled')),
    attempt          INTEGER  NOT NULL CHECK (attempt >= 0),
    max_attempts     INTEGER  NOT NULL CHECK (max_attempts >= 1),
    not_before       BIGINT   NOT NULL,
    claim_owner      TEXT COLLATE "C" CHECK (char_length(claim_owner) BETWEEN 1 AND 128),
    claim_generation BIGINT   NOT NULL CHECK (claim_generation >= 0),
    claim_expires_at BIGINT,
    due_at           BIGINT,
    result           JSONB    NOT NULL,
    error            JSONB    NOT NULL,
    consumed         SMALLINT NOT NULL CHECK (consumed IN (0, 1)),
    created_at       BIGINT   NOT NULL
);
CREATE UNIQUE INDEX kit_commands_operation ON kit_commands (tenant_id, run_id, operation_key);
CREATE INDEX kit_commands_due ON kit_commands (tenant_id, due_at, command_id) WHERE due_at IS NOT NULL;

CREATE TABLE kit_signals (
    signal_id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id         TEXT COLLATE "C" NOT NULL,
    run_id            TEXT COLLATE "C" NOT NULL,
    name              TEXT COLLATE "C" NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
    payload           JSONB  NOT NULL,
    dedup_key         TEXT COLLATE "C" NOT NULL CHECK (char_length(dedup_key) BETWEEN 1 AND 255),
    status            TEXT COLLATE "C" NOT NULL CHECK (status IN ('pending', 'consumed')),
    consumed_revision BIGINT,
    sent_at           BIGINT NOT NULL
);
CREATE UNIQUE INDEX kit_signals_dedup ON kit_signals (tenant_id, run_id, dedup_key);

CREATE TABLE kit_timers (
    timer_id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id     TEXT COLLATE "C" NOT NULL,
    run_id        TEXT COLLATE "C" NOT NULL,
    operation_key TEXT COLLATE "C" NOT NULL CHECK (char_length(operation_key) BETWEEN 1 AND 255),
    fire_at       BIGINT NOT NULL,
    status        TEXT COLLATE "C" NOT NULL CHECK (status IN ('scheduled', 'fired', 'consumed', 'cancelled')),
    created_at    BIGINT NOT NULL
);
CREATE UNIQUE INDEX kit_timers_operation ON kit_timers (tenant_id, run_id, operation_key);
CREATE INDEX kit_timers_due ON kit_timers (tenant_id, fire_at, timer_id) WHERE status = 'scheduled';
