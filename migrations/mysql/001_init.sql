-- The durable-workflow storage schema for MySQL 8 and MariaDB >= 10.6 (kit contract v1).
--
-- The same tables, keys and indexes as migrations/sqlite/001_init.sql, in
-- InnoDB's types. Unqualified names: the adapter's connections work inside
-- the one database (kit_<hex>, or yours) they were opened on.
--
-- Re-runnable on purpose. MySQL and MariaDB commit DDL implicitly, so the
-- kit applies a migration file statement by statement and records it only
-- after its last statement succeeded; a file interrupted half-way is simply
-- run again. Every statement here is therefore idempotent: CREATE TABLE IF
-- NOT EXISTS with its indexes declared inline (MySQL 8 has no CREATE INDEX
-- IF NOT EXISTS; MariaDB does), and each CREATE TABLE is a single atomic DDL.
-- Later files must keep that property.
--
-- Conventions shared by every dialect of the kit, and why they hold here:
--   * time is BIGINT microseconds since the Unix epoch, UTC: exact, immune to
--     the session time_zone (TIMESTAMP converts through it) and to DATETIME's
--     silent rounding when a column or NOW() lacks (6);
--   * flags are TINYINT 0/1 with CHECK constraints (enforced by MySQL >= 8.0.16
--     and MariaDB >= 10.2; constraint names are unique per database on MySQL,
--     so each carries its table's name);
--   * every key and name column is VARBINARY holding UTF-8: compared, indexed
--     and ordered byte by byte, so 'Key'/'key' and 'é'/'e'+U+0301 stay four
--     keys and ORDER BY run_id is code point order. Not VARCHAR ... COLLATE
--     utf8mb4_bin: that collation is PAD SPACE on both servers, so 'k' and
--     'k ' would collide on a unique key, and the NO PAD binary collations
--     differ by server (utf8mb4_0900_bin on MySQL 8, utf8mb4_nopad_bin on
--     MariaDB). Byte lengths are the contract's character limits times four
--     (kit/contract/validation.py: tenant 64, run id and worker id 128,
--     keys 255, names 200); the widest index, (tenant, run, key), is
--     256 + 512 + 1020 = 1788 bytes, inside InnoDB's 3072-byte limit;
--   * JSON is LONGTEXT utf8mb4 text written by the store's own encoder and
--     parsed back by it: values round-trip exactly. Not the JSON type: MySQL
--     8 stores it binary and turns integers beyond 64 bits (2**64 + 1, 10**30)
--     into doubles. No JSON_VALID CHECK either: MariaDB's JSON_VALID answers 0
--     for nesting depth >= 32 and MySQL's raises beyond 100, so the check
--     would refuse JSON values the contract requires the store to keep;
--   * due_at is when a row becomes claimable (NULL: never by time). The claim
--     indexes (tenant_id, due_at, id) serve the claim's WHERE and ORDER BY, so
--     a SKIP LOCKED claimer reads (and locks) only the rows it returns:
--     InnoDB locks every row a locking read examines, and without them a
--     claimer sorting the whole tenant would lock every due row and starve
--     the next claimer.

CREATE TABLE IF NOT EXISTS kit_definitions (
    tenant_id  VARBINARY(256) NOT NULL,
    name       VARBINARY(800) NOT NULL,
    version    VARBINARY(800) NOT NULL,
    digest     CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    body       LONGBLOB       NOT NULL,
    created_at BIGINT         NOT NULL,
    PRIMARY KEY (tenant_id, name, version)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS kit_runs (
    tenant_id        VARBINARY(256)  NOT NULL,
    run_id           VARBINARY(512)  NOT NULL,
    def_name         VARBINARY(800)  NOT NULL,
    def_version      VARBINARY(800)  NOT NULL,
    def_digest       CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    status           VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    revision         BIGINT          NOT NULL,
    claim_owner      VARBINARY(512),
    claim_generation BIGINT          NOT NULL,
    claim_expires_at BIGINT,
    wake_at          BIGINT,
    due_at           BIGINT,
    wakeup_pending   TINYINT         NOT NULL,
    cancel_requested TINYINT         NOT NULL,
    cancel_reason    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    input            LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    output           LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    error            LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    idempotency_key  VARBINARY(1020),
    created_at       BIGINT          NOT NULL,
    updated_at       BIGINT          NOT NULL,
    PRIMARY KEY (tenant_id, run_id),
    -- NULL keys never collide in a MySQL unique index: no partial index needed.
    UNIQUE KEY kit_runs_idempotency (tenant_id, idempotency_key),
    KEY kit_runs_due (tenant_id, due_at, run_id),
    CONSTRAINT kit_runs_status CHECK (status IN ('pending', 'running', 'blocked', 'completed', 'failed', 'cancelled')),
    CONSTRAINT kit_runs_flags CHECK (wakeup_pending IN (0, 1) AND cancel_requested IN (0, 1))
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS kit_events (
    tenant_id     VARBINARY(256)  NOT NULL,
    run_id        VARBINARY(512)  NOT NULL,
    seq           BIGINT          NOT NULL,
    kind          VARBINARY(800)  NOT NULL,
    operation_key VARBINARY(1020),
    payload       LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    revision      BIGINT          NOT NULL,
    created_at    BIGINT          NOT NULL,
    PRIMARY KEY (tenant_id, run_id, seq),
    UNIQUE KEY kit_events_operation (tenant_id, run_id, operation_key)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS kit_commands (
    command_id       BIGINT          NOT NULL AUTO_INCREMENT,
    tenant_id        VARBINARY(256)  NOT NULL,
    run_id           VARBINARY(512)  NOT NULL,
    operation_key    VARBINARY(1020) NOT NULL,
    name             VARBINARY(800)  NOT NULL,
    queue            VARBINARY(800)  NOT NULL,
    input            LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    status           VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    attempt          INT             NOT NULL,
    max_attempts     INT             NOT NULL,
    not_before       BIGINT          NOT NULL,
    claim_owner      VARBINARY(512),
    claim_generation BIGINT          NOT NULL,
    claim_expires_at BIGINT,
    due_at           BIGINT,
    result           LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    error            LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    consumed         TINYINT         NOT NULL,
    created_at       BIGINT          NOT NULL,
    PRIMARY KEY (command_id),
    UNIQUE KEY kit_commands_operation (tenant_id, run_id, operation_key),
    KEY kit_commands_due (tenant_id, due_at, command_id),
    CONSTRAINT kit_commands_status CHECK (status IN ('pending', 'claimed', 'completed', 'failed', 'cancelled')),
    CONSTRAINT kit_commands_flags CHECK (consumed IN (0, 1))
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS kit_signals (
    signal_id         BIGINT          NOT NULL AUTO_INCREMENT,
    tenant_id         VARBINARY(256)  NOT NULL,
    run_id            VARBINARY(512)  NOT NULL,
    name              VARBINARY(800)  NOT NULL,
    payload           LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    dedup_key         VARBINARY(1020) NOT NULL,
    status            VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    consumed_revision BIGINT,
    sent_at           BIGINT          NOT NULL,
    PRIMARY KEY (signal_id),
    UNIQUE KEY kit_signals_dedup (tenant_id, run_id, dedup_key),
    CONSTRAINT kit_signals_status CHECK (status IN ('pending', 'consumed'))
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS kit_timers (
    timer_id      BIGINT          NOT NULL AUTO_INCREMENT,
    tenant_id     VARBINARY(256)  NOT NULL,
    run_id        VARBINARY(512)  NOT NULL,
    operation_key VARBINARY(1020) NOT NULL,
    fire_at       BIGINT          NOT NULL,
    status        VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    created_at    BIGINT          NOT NULL,
    PRIMARY KEY (timer_id),
    UNIQUE KEY kit_timers_operation (tenant_id, run_id, operation_key),
    KEY kit_timers_due (tenant_id, status, fire_at, timer_id),
    CONSTRAINT kit_timers_status CHECK (status IN ('scheduled', 'fired', 'consumed', 'cancelled'))
) ENGINE = InnoDB;
