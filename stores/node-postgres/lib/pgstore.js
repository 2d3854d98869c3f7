'use strict';
// The contract's operations on PostgreSQL (CONTRACT.md), one transaction each (or joining the open
// unit of work). Same guarantees and lock order as the kit's Python PostgreSQL adapter: writers lock
// the run row first, read the store clock once after their locks, decide fences on the locked row,
// and claims pick candidates with FOR UPDATE SKIP LOCKED evaluated exactly once.
const crypto = require('crypto');
const fs = require('fs');
const path = require('path');
const { Client } = require('pg');
const V = require('./values');

const { ContractError, LIMITS } = V;
const SCHEMA_MARK = 'durable-storage-kit: kit-owned throw-away schema, dropped by the kit';
const LOCK_TIMEOUT_MS = 5000;
const STATEMENT_TIMEOUT_MS = 60000;
const KILL_TIMEOUT_MS = 10000;
const TEST_CLOCK_START = 1893553445678901n; // 2030-01-02T03:04:05.678901Z
const RETRIES = 5;
const TERMINAL = new Set(['completed', 'failed', 'cancelled']);
const CORE_TABLES = ['kit_definitions', 'kit_runs', 'kit_events', 'kit_commands', 'kit_signals', 'kit_timers'];
const BUG = process.env.KIT_NODE_STORE_BUG || '';

const RUN_COLS = 'run_id, tenant_id, def_name, def_version, def_digest, status, revision, claim_owner, claim_generation, ' +
  'claim_expires_at, wake_at, wakeup_pending, cancel_requested, cancel_reason, input::text, output::text, error::text, ' +
  'idempotency_key, created_at, updated_at';
const EVENT_COLS = 'run_id, seq, kind, operation_key, payload::text, revision, created_at';
const COMMAND_COLS = 'command_id, run_id, operation_key, name, queue, input::text, status, attempt, max_attempts, not_before, ' +
  'claim_owner, claim_generation, claim_expires_at, result::text, error::text, consumed';
const SIGNAL_COLS = 'signal_id, run_id, name, payload::text, dedup_key, status, consumed_revision, sent_at';
const TIMER_COLS = 'timer_id, run_id, operation_key, fire_at, status';

// ---- rows -> wire entities -----------------------------------------------------
const big = (v) => (v === null || v === undefined ? null : BigInt(v));
const toRun = (r) => ({
  run_id: r.run_id, tenant_id: r.tenant_id,
  definition: { name: r.def_name, version: r.def_version, digest: r.def_digest },
  status: r.status, revision: V.intOut(r.revision), claim_owner: r.claim_owner,
  claim_generation: V.intOut(r.claim_generation), claim_expires_at: V.dtOut(r.claim_expires_at),
  wake_at: V.dtOut(r.wake_at), wakeup_pending: Number(r.wakeup_pending) === 1,
  cancel_requested: Number(r.cancel_requested) === 1, cancel_reason: r.cancel_reason,
  input: V.payloadOut(r.input), output: V.payloadOut(r.output), error: V.payloadOut(r.error),
  idempotency_key: r.idempotency_key, created_at: V.dtOut(r.created_at), updated_at: V.dtOut(r.updated_at),
});
const toEvent = (r) => ({
  run_id: r.run_id, seq: V.intOut(r.seq), kind: r.kind, operation_key: r.operation_key,
  payload: V.payloadOut(r.payload), revision: V.intOut(r.revision), created_at: V.dtOut(r.created_at),
});
const toCommand = (r) => ({
  command_id: String(r.command_id), run_id: r.run_id, operation_key: r.operation_key, name: r.name, queue: r.queue,
  input: V.payloadOut(r.input), status: r.status, attempt: Number(r.attempt), max_attempts: Number(r.max_attempts),
  not_before: V.dtOut(r.not_before), claim_owner: r.claim_owner, claim_generation: V.intOut(r.claim_generation),
  claim_expires_at: V.dtOut(r.claim_expires_at), result: V.payloadOut(r.result), error: V.payloadOut(r.error),
  consumed: Number(r.consumed) === 1,
});
const toSignal = (r) => ({
  signal_id: String(r.signal_id), run_id: r.run_id, name: r.name, payload: V.payloadOut(r.payload),
  dedup_key: r.dedup_key, status: r.status,
  consumed_revision: r.consumed_revision === null ? null : V.intOut(r.consumed_revision), sent_at: V.dtOut(r.sent_at),
});
const toTimer = (r) => ({
  timer_id: String(r.timer_id), run_id: r.run_id, operation_key: r.operation_key, fire_at: V.dtOut(r.fire_at), status: r.status,
});
const toDefinition = (r) => ({
  name: r.name, version: r.version, digest: r.digest, body: { $bytes: r.body.toString('base64') }, created_at: V.dtOut(r.created_at),
});

// ---- errors ----------------------------------------------------------------------
function translate(err) {
  if (err instanceof ContractError) return err;
  const code = err && err.code;
  const detail = `${code || 'error'}: ${String((err && err.message) || err).split('\n')[0].slice(0, 200)}`;
  if (code === '40P01' || code === '40001') return new ContractError('TransientError', `PostgreSQL rolled the attempt back (${detail}); it is safe to retry`);
  if (code === '55P03') {
    return new ContractError('LockTimeout', `a lock wait timed out after lock_timeout (${LOCK_TIMEOUT_MS} ms; ${detail}): ` +
      'another transaction held a lock this operation needed; the operation was rolled back: retry it later');
  }
  if (code === '57014') return new ContractError('StorageError', `the statement was cancelled (${detail}); the operation was rolled back`);
  if ((typeof code === 'string' && (code.startsWith('08') || code.startsWith('57P'))) || !code) {
    return new ContractError('ConnectionLost', `the PostgreSQL session ended (${detail}); whether the last write landed is unknown`);
  }
  return new ContractError('StorageError', `PostgreSQL error ${detail}`);
}

function connParams() {
  const url = (process.env.KIT_POSTGRES_URL || '').replace(/^postgresql\+\w+:/, 'postgresql:');
  if (url) return { connectionString: url };
  return {
    host: process.env.PGHOST || '127.0.0.1', port: Number(process.env.PGPORT || 5432),
    user: process.env.PGUSER || 'postgres', database: process.env.PGDATABASE || 'postgres', password: process.env.PGPASSWORD,
  };
}

async function connect(namespace) {
  const options = [`-c lock_timeout=${LOCK_TIMEOUT_MS}`, `-c statement_timeout=${STATEMENT_TIMEOUT_MS}`, '-c TimeZone=UTC'];
  if (namespace) options.push(`-c search_path=${namespace}`);
  const client = new Client({ ...connParams(), application_name: `kit:${namespace || 'admin'}`, options: options.join(' '),
    connectionTimeoutMillis: 5000 });
  client.dead = null;
  client.on('error', (e) => { client.dead = String(e.message || e); });
  await client.connect();
  return client;
}

function loadMigrations() {
  const dir = path.join(__dirname, '..', '..', '..', 'migrations', 'postgres');
  return fs.readdirSync(dir).filter((f) => /^\d+_.+\.sql$/.test(f)).sort().map((f) => {
    const sql = fs.readFileSync(path.join(dir, f), 'utf8');
    const m = /^(\d+)_(.+)\.sql$/.exec(f);
    return { version: Number(m[1]), name: m[2], sql, checksum: checksum(sql) };
  });
}
const checksum = (sql) => crypto.createHash('sha256').update(sql.replace(/\r\n/g, '\n'), 'utf8').digest('hex');

function splitStatements(sql) {
  const noComments = sql.split('\n').map((line) => line.replace(/--.*$/, '')).join('\n');
  return noComments.split(';').map((s) => s.trim()).filter((s) => s.length > 0);
}

// =====================================================================================
class Store {
  constructor(db, client, tenant, clock, migrations, faults) {
    this.db = db; this.client = client; this.tenant = tenant; this.clock = clock;
    this.migrations = migrations; this.faults = faults;
    this.depth = 0; this.rollbackOnly = false; this.closed = false;
    this.call = null; // the kit's request id of the operation in flight (fault points name it)
    this.nowSql = clock === 'test' ? '(SELECT now_us FROM kit_test_clock WHERE id = 1)' : '(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::bigint';
  }

  // -- plumbing -------------------------------------------------------------------
  checkOpen() {
    if (this.client.dead || this.closed) {
      throw new ContractError('ConnectionLost', `this store's connection was lost (${this.client.dead || 'closed'}): open a new store from its Database`);
    }
  }

  async point(statement) {
    if (this.faults) await this.db.server.faultPoint(this.call, this.id, statement);
  }

  async q(sql, params = []) {
    let n = 0;
    const text = sql.replace(/\?/g, () => `$${(n += 1)}`);
    await this.point(text);
    try {
      return await this.client.query({ text, values: params.map((p) => (typeof p === 'bigint' ? p.toString() : p)) });
    } catch (e) {
      const t = translate(e);
      if (t.type === 'ConnectionLost') this.client.dead = this.client.dead || t.message;
      throw t;
    }
  }

  async quietRollback() {
    if (this.client.dead) return;
    try { await this.point('ROLLBACK'); } catch (e) { /* the rollback runs anyway */ }
    try { await this.client.query('ROLLBACK'); } catch (e) { /* no transaction, or the session is gone */ }
  }

  async tx(begin, fn) {
    if (this.depth) {
      this.depth += 1;
      try { return await fn(); } catch (e) { this.rollbackOnly = true; throw e; } finally { this.depth -= 1; }
    }
    this.checkOpen();
    this.rollbackOnly = false;
    try { await this.q(begin); } catch (e) { await this.quietRollback(); throw e; }
    this.depth = 1;
    try {
      const result = await fn();
      await this.commitNow();
      return result;
    } catch (e) {
      await this.quietRollback();
      throw e;
    } finally { this.depth = 0; }
  }

  async commitNow() {
    await this.point('COMMIT');
    try { await this.client.query('COMMIT'); } catch (e) { throw translate(e); }
    await this.point('COMMITTED');
  }

  async write(fn) {
    for (let attempt = 0; ; attempt += 1) {
      try {
        return await this.tx('BEGIN ISOLATION LEVEL READ COMMITTED', fn);
      } catch (e) {
        if (e.type !== 'TransientError' || this.depth || attempt >= RETRIES - 1) throw e;
        await new Promise((r) => setTimeout(r, (1 + Math.random() * 9) * (attempt + 1)));
      }
    }
  }

  async read(fn) {
    for (let attempt = 0; ; attempt += 1) {
      try {
        return await this.tx('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY', fn);
      } catch (e) {
        if (e.type !== 'TransientError' || this.depth || attempt >= RETRIES - 1) throw e;
        await new Promise((r) => setTimeout(r, (1 + Math.random() * 9) * (attempt + 1)));
      }
    }
  }

  async now() {
    const r = await this.q(`SELECT ${this.nowSql} AS now`);
    if (!r.rows.length || r.rows[0].now === null) throw new ContractError('ClockModeError', 'the test clock table is empty: open the store through its Database');
    return BigInt(r.rows[0].now);
  }

  in(values) { return `(${values.map(() => '?').join(', ')})`; }

  // -- unit of work -----------------------------------------------------------------
  async begin() {
    if (this.depth) { this.depth += 1; return null; }
    this.checkOpen();
    this.rollbackOnly = false;
    try { await this.q('BEGIN ISOLATION LEVEL READ COMMITTED'); } catch (e) { await this.quietRollback(); throw e; }
    this.depth = 1;
    return null;
  }

  async commit() {
    if (!this.depth) throw new ContractError('NotInTransaction', 'commit without begin: open a unit of work with begin first');
    if (this.depth > 1) { this.depth -= 1; return null; }
    this.depth = 0;
    if (this.rollbackOnly) {
      await this.quietRollback();
      throw new ContractError('TransactionRolledBack', 'an inner transaction() block failed, so the whole unit of work was rolled back: ' +
        'let the exception propagate or handle it outside the unit');
    }
    try { await this.commitNow(); } catch (e) { await this.quietRollback(); throw e; }
    return null;
  }

  async rollback() {
    if (!this.depth) return null;
    if (this.depth > 1) { this.depth -= 1; this.rollbackOnly = true; return null; }
    this.depth = 0;
    await this.quietRollback();
    return null;
  }

  async lock_run({ run_id }) {
    if (!this.depth) throw new ContractError('NotInTransaction', 'lock_run() needs an open transaction(): call it inside one');
    return this.write(async () => { const r = await this.lockedRun(run_id); return r && toRun(r); });
  }

  // -- schema -------------------------------------------------------------------------
  async requireKitSchema() {
    const r = await this.q("SELECT n.nspname, obj_description(n.oid, 'pg_namespace') AS mark FROM pg_catalog.pg_namespace n WHERE n.nspname = current_schema()");
    if (!r.rows.length) throw new ContractError('ConfigurationError', 'no schema to migrate into: open stores through a provisioned database');
    if (r.rows[0].mark !== SCHEMA_MARK) throw new ContractError('ConfigurationError', `refusing to migrate into schema ${r.rows[0].nspname}: it does not carry the kit's ownership mark`);
  }

  async migrate() {
    if (this.depth) throw V.invalid('migrate() cannot run inside a transaction(): call it on its own');
    await this.read(() => this.requireKitSchema());
    return this.write(async () => {
      await this.q('SELECT pg_advisory_xact_lock(7039348, hashtext(current_schema()))');
      await this.q('CREATE TABLE IF NOT EXISTS kit_schema_migrations (version INTEGER NOT NULL PRIMARY KEY, name VARCHAR(200) NOT NULL, ' +
        'checksum VARCHAR(64) NOT NULL, applied_at BIGINT NOT NULL)');
      const done = new Set((await this.q('SELECT version FROM kit_schema_migrations')).rows.map((r) => Number(r.version)));
      const names = [];
      for (const m of this.migrations) {
        if (done.has(m.version)) continue;
        for (const statement of splitStatements(m.sql)) await this.q(statement);
        await this.q('INSERT INTO kit_schema_migrations (version, name, checksum, applied_at) VALUES (?, ?, ?, ?)',
          [m.version, m.name, m.checksum, BigInt(Date.now()) * 1000n]);
        names.push(`${String(m.version).padStart(3, '0')}_${m.name}`);
      }
      return names;
    });
  }

  async tableExists(table) {
    const r = await this.q("SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace " +
      "WHERE n.nspname = current_schema() AND c.relname = ? AND c.relkind IN ('r', 'p')", [table]);
    return r.rows.length > 0;
  }

  async verify_schema() {
    return this.read(async () => {
      const schemaError = (problem, m) => new ContractError('SchemaError', m, { problem });
      if (!(await this.tableExists('kit_schema_migrations'))) throw schemaError('absent', 'the kit schema is absent (no migrations recorded): run migrate() first');
      const applied = (await this.q('SELECT version, name, checksum FROM kit_schema_migrations ORDER BY version')).rows;
      if (!applied.length) throw schemaError('absent', 'the kit schema is absent (no migrations recorded): run migrate() first');
      const code = new Map(this.migrations.map((m) => [m.version, m]));
      const byVersion = new Map(applied.map((a) => [Number(a.version), a]));
      const newer = [...byVersion.keys()].filter((v) => !code.has(v)).sort((a, b) => a - b);
      if (newer.length) throw schemaError('newer', `the database has migrations [${newer.join(', ')}] that this code does not know: upgrade the code (the schema is newer than it)`);
      for (const [version, m] of code) {
        const rec = byVersion.get(version);
        if (rec && rec.checksum !== m.checksum) {
          throw schemaError('tampered', `migration ${version} ${m.name} was changed after it was applied: restore the original file and add a new numbered migration instead`);
        }
      }
      const missing = [...code.keys()].filter((v) => !byVersion.has(v));
      if (missing.length) throw schemaError('partial', `the schema is partly applied: migrations [${missing.join(', ')}] are missing: run migrate()`);
      const tables = [];
      for (const t of CORE_TABLES) if (!(await this.tableExists(t))) tables.push(t);
      if (tables.length) throw schemaError('partial', `the schema is partly applied: tables ${tables.join(', ')} are missing although every migration is recorded`);
      return null;
    });
  }

  // -- clock --------------------------------------------------------------------------
  requireTestClock() {
    if (this.clock !== 'test') throw new ContractError('ClockModeError', 'this store runs on the database clock: open it with clock=TEST');
  }

  async installTestClock() {
    this.requireTestClock();
    await this.write(async () => {
      await this.q('SELECT pg_advisory_xact_lock(7039348, hashtext(current_schema()))');
      await this.q('CREATE TABLE IF NOT EXISTS kit_test_clock (id INTEGER NOT NULL PRIMARY KEY, now_us BIGINT NOT NULL)');
      await this.q('INSERT INTO kit_test_clock (id, now_us) VALUES (1, ?) ON CONFLICT DO NOTHING', [TEST_CLOCK_START]);
    });
  }

  async emptyAll() {
    this.requireTestClock();
    await this.write(async () => {
      for (const t of [...CORE_TABLES].reverse()) if (await this.tableExists(t)) await this.q(`DELETE FROM ${t}`);
      await this.q('UPDATE kit_test_clock SET now_us = ? WHERE id = 1', [TEST_CLOCK_START]);
    });
  }

  async now_op() { return V.dtOut(await this.read(() => this.now())); }

  async set_test_clock({ at }) {
    this.requireTestClock();
    const us = V.parseDt(at, 'at');
    await this.write(() => this.q('UPDATE kit_test_clock SET now_us = ? WHERE id = 1', [us]));
    return null;
  }

  async advance_test_clock({ by }) {
    this.requireTestClock();
    const delta = V.parseDuration(by, 'by');
    return V.dtOut(await this.write(async () => {
      await this.q('UPDATE kit_test_clock SET now_us = now_us + ? WHERE id = 1', [delta]);
      return this.now();
    }));
  }

  // -- definitions --------------------------------------------------------------------
  async definition(name, version) {
    const r = await this.q('SELECT name, version, digest, body, created_at FROM kit_definitions WHERE tenant_id = ? AND name = ? AND version = ?',
      [this.tenant, name, version]);
    return r.rows.length ? r.rows[0] : null;
  }

  async ensure_definition({ name, version, digest, body }) {
    V.checkText('name', name, LIMITS.name);
    V.checkText('version', version, LIMITS.name);
    if (body === null || typeof body !== 'object' || typeof body.$bytes !== 'string') throw V.invalid(`definition body must be bytes, got ${V.typeName(body)}`);
    const bytes = Buffer.from(body.$bytes, 'base64');
    if (typeof digest !== 'string' || !/^[0-9a-f]{64}$/.test(digest)) throw V.invalid('digest must be 64 lowercase hex characters (sha256 of the body)');
    if (crypto.createHash('sha256').update(bytes).digest('hex') !== digest) throw V.invalid('digest is not the sha256 of the body: pass kit.contract.digest_of(body)');
    return this.write(async () => {
      const now = await this.now();
      await this.q('INSERT INTO kit_definitions (tenant_id, name, version, digest, body, created_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING',
        [this.tenant, name, version, digest, bytes, now]);
      return toDefinition(await this.definition(name, version));
    });
  }

  async get_definition({ name, version }) {
    if (typeof name !== 'string' || typeof version !== 'string') return null;
    return this.read(async () => { const d = await this.definition(name, version); return d && toDefinition(d); });
  }

  async list_definition_versions({ name }) {
    V.checkText('name', name, LIMITS.name);
    return this.read(async () => {
      const r = await this.q('SELECT name, version, digest, body, created_at FROM kit_definitions WHERE tenant_id = ? AND name = ?',
        [this.tenant, name]);
      // Code-point order (JS compares strings by UTF-16 code units, which misorders characters beyond U+FFFF).
      const byCodePoint = (a, b) => {
        const x = Array.from(a.version, (c) => c.codePointAt(0));
        const y = Array.from(b.version, (c) => c.codePointAt(0));
        for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] - y[i];
        return x.length - y.length;
      };
      return r.rows.filter((d) => d.name === name).sort(byCodePoint).map(toDefinition);
    });
  }

  // -- runs ---------------------------------------------------------------------------
  async runBy(column, value, lock = false) {
    const r = await this.q(`SELECT ${RUN_COLS} FROM kit_runs WHERE tenant_id = ? AND ${column} = ?${lock ? ' FOR UPDATE' : ''}`, [this.tenant, value]);
    return r.rows.length ? r.rows[0] : null;
  }

  lockedRun(runId) { return this.runBy('run_id', runId, true); }

  async start_run({ run_id, definition, input, idempotency_key }) {
    V.checkText('run_id', run_id, LIMITS.runId);
    if (definition === null || typeof definition !== 'object') throw V.invalid('definition must be a DefinitionRef');
    V.checkText('definition.name', definition.name, LIMITS.name);
    V.checkText('definition.version', definition.version, LIMITS.name);
    const inputText = V.payloadText('input', input);
    if (idempotency_key !== null && idempotency_key !== undefined) V.checkText('idempotency_key', idempotency_key, LIMITS.key);
    const key = idempotency_key === undefined ? null : idempotency_key;
    return this.write(async () => {
      if (key !== null) {
        const existing = await this.runBy('idempotency_key', key);
        if (existing) return { run: toRun(existing), created: false };
      }
      const stored = await this.definition(definition.name, definition.version);
      if (!stored) throw new ContractError('DefinitionNotFound', `definition ${definition.name} version ${definition.version} is unknown: call ensure_definition() first`);
      if (stored.digest !== definition.digest) {
        throw new ContractError('DefinitionMismatch', `definition ${definition.name} version ${definition.version} is stored with digest ` +
          `${stored.digest.slice(0, 12)}..., not ${String(definition.digest).slice(0, 12)}...: register the changed body under a new version`);
      }
      const now = await this.now();
      const ins = await this.q('INSERT INTO kit_runs (tenant_id, run_id, def_name, def_version, def_digest, status, revision, claim_owner, ' +
        'claim_generation, claim_expires_at, wake_at, due_at, wakeup_pending, cancel_requested, cancel_reason, input, output, error, ' +
        "idempotency_key, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'pending', 0, NULL, 0, NULL, ?, ?, 0, 0, NULL, ?, 'null', 'null', ?, ?, ?) " +
        'ON CONFLICT DO NOTHING', [this.tenant, run_id, stored.name, stored.version, stored.digest, now, now, inputText, key, now, now]);
      if (ins.rowCount !== 1) {
        if (key !== null) {
          const existing = await this.runBy('idempotency_key', key);
          if (existing) return { run: toRun(existing), created: false };
        }
        throw new ContractError('RunAlreadyExists', `run ${run_id} already exists: use a new run id, or repeat the original idempotency key to get the existing run back`);
      }
      return { run: toRun(await this.runBy('run_id', run_id)), created: true };
    });
  }

  async get_run({ run_id }) {
    return this.read(async () => { const r = await this.runBy('run_id', run_id); return r && toRun(r); });
  }

  async list_runs({ status, after, limit }) {
    const n = V.checkLimit(limit === undefined ? 100 : limit);
    const where = ['tenant_id = ?']; const params = [this.tenant];
    if (status !== null && status !== undefined) {
      if (!['pending', 'running', 'blocked', 'completed', 'failed', 'cancelled'].includes(status)) throw V.invalid(`status ${JSON.stringify(status)} is not a run status`);
      where.push('status = ?'); params.push(status);
    }
    if (after !== null && after !== undefined) { where.push('run_id > ?'); params.push(after); }
    return this.read(async () => (await this.q(`SELECT ${RUN_COLS} FROM kit_runs WHERE ${where.join(' AND ')} ORDER BY run_id LIMIT ${n}`, params)).rows.map(toRun));
  }

  async get_history({ run_id, after_seq, limit }) {
    let sql = `SELECT ${EVENT_COLS} FROM kit_events WHERE tenant_id = ? AND run_id = ? AND seq > ? ORDER BY seq`;
    if (limit !== null && limit !== undefined) sql += ` LIMIT ${V.checkLimit(limit)}`;
    const after = after_seq === undefined || after_seq === null ? 0n : V.toBig(after_seq);
    return this.read(async () => (await this.q(sql, [this.tenant, run_id, after])).rows.map(toEvent));
  }

  async makeRunnable(run, now) {
    if (TERMINAL.has(run.status)) return;
    if (run.status === 'running') {
      await this.q('UPDATE kit_runs SET wakeup_pending = 1, updated_at = ? WHERE tenant_id = ? AND run_id = ?', [now, this.tenant, run.run_id]);
      return;
    }
    const wake = big(run.wake_at);
    const at = wake === null || wake > now ? now : wake;
    await this.q("UPDATE kit_runs SET status = 'pending', wake_at = ?, due_at = ?, updated_at = ? WHERE tenant_id = ? AND run_id = ?",
      [at, at, now, this.tenant, run.run_id]);
  }

  async request_cancel({ run_id, reason }) {
    V.checkText('run_id', run_id, LIMITS.runId);
    if (reason !== null && reason !== undefined && reason !== '') V.checkText('reason', reason, LIMITS.reason); // free text may be empty
    return this.write(async () => {
      const run = await this.lockedRun(run_id);
      if (!run) return 'not_found';
      if (TERMINAL.has(run.status)) return 'terminal';
      if (Number(run.cancel_requested) === 1) return 'duplicate';
      const now = await this.now();
      await this.q('UPDATE kit_runs SET cancel_requested = 1, cancel_reason = ? WHERE tenant_id = ? AND run_id = ?', [reason === undefined ? null : reason, this.tenant, run_id]);
      await this.makeRunnable(run, now);
      return 'committed';
    });
  }

  // -- decision claims -------------------------------------------------------------------
  checkClaim(worker_id, lease, limit) {
    V.checkText('worker_id', worker_id, LIMITS.worker);
    return [V.checkLease(lease), V.checkLimit(limit === undefined ? 1 : limit)];
  }

  async claim_runs({ worker_id, lease, limit }) {
    const [leaseUs, n] = this.checkClaim(worker_id, lease, limit);
    return this.write(async () => {
      const now = await this.now();
      const expires = now + leaseUs;
      const rows = (await this.q("UPDATE kit_runs AS r SET status = 'running', claim_owner = ?, claim_generation = r.claim_generation + 1, " +
        'claim_expires_at = ?, due_at = ?, wake_at = NULL, wakeup_pending = 0, updated_at = ? ' +
        `FROM unnest(ARRAY(SELECT run_id FROM kit_runs WHERE tenant_id = ? AND due_at <= ? ORDER BY due_at, run_id LIMIT ${n} FOR UPDATE SKIP LOCKED)) ` +
        'WITH ORDINALITY AS picked(id, position) WHERE r.tenant_id = ? AND r.run_id = picked.id ' +
        'RETURNING r.run_id, r.claim_generation, r.revision, picked.position',
      [worker_id, expires, expires, now, this.tenant, now, this.tenant])).rows;
      if (rows.length > n) throw new ContractError('StorageError', `a claim updated ${rows.length} rows for a limit of ${n}: rolled back`);
      rows.sort((a, b) => Number(a.position) - Number(b.position));
      return rows.map((r) => ({ run_id: r.run_id, worker_id, generation: V.intOut(r.claim_generation), expires_at: V.dtOut(expires), revision: V.intOut(r.revision) }));
    });
  }

  claimFields(claim, kind) {
    if (claim === null || typeof claim !== 'object' || typeof claim.run_id !== 'string' || !V.isInt(claim.generation) || typeof claim.worker_id !== 'string') {
      throw V.invalid(`claim must be a ${kind}`);
    }
    return { ...claim, generation: V.toBig(claim.generation) };
  }

  fenced(run, claim, now, ignoreGeneration = false) {
    return run.claim_owner === claim.worker_id && (ignoreGeneration || BigInt(run.claim_generation) === claim.generation) &&
      run.claim_expires_at !== null && now < BigInt(run.claim_expires_at);
  }

  refuseRun(run, claim, now, ignoreGeneration = false) {
    if (!run) return 'not_found';
    if (TERMINAL.has(run.status)) return 'terminal';
    if (!this.fenced(run, claim, now, ignoreGeneration)) return 'claim_lost';
    return null;
  }

  async renew_run_claim({ claim, lease }) {
    const c = this.claimFields(claim, 'RunClaim');
    const leaseUs = V.checkLease(lease);
    return this.write(async () => {
      const run = await this.lockedRun(c.run_id);
      const now = await this.now();
      const refused = this.refuseRun(run, c, now);
      if (refused) return refused;
      await this.q('UPDATE kit_runs SET claim_expires_at = ?, due_at = ?, updated_at = ? WHERE tenant_id = ? AND run_id = ? AND claim_generation = ?',
        [now + leaseUs, now + leaseUs, now, this.tenant, c.run_id, c.generation]);
      return 'renewed';
    });
  }

  async release_run_claim({ claim }) {
    const c = this.claimFields(claim, 'RunClaim');
    return this.write(async () => {
      const run = await this.lockedRun(c.run_id);
      const now = await this.now();
      const refused = this.refuseRun(run, c, now);
      if (refused) return refused;
      await this.q("UPDATE kit_runs SET status = 'pending', claim_owner = NULL, claim_expires_at = NULL, wake_at = ?, due_at = ?, " +
        'wakeup_pending = 0, updated_at = ? WHERE tenant_id = ? AND run_id = ? AND claim_generation = ?',
      [now, now, now, this.tenant, c.run_id, c.generation]);
      return 'committed';
    });
  }

  async load_claimed({ claim }) {
    const c = this.claimFields(claim, 'RunClaim');
    return this.read(async () => {
      const run = await this.runBy('run_id', c.run_id);
      const refused = this.refuseRun(run, c, await this.now());
      if (refused) return { outcome: refused };
      const key = [this.tenant, run.run_id];
      const history = (await this.q(`SELECT ${EVENT_COLS} FROM kit_events WHERE tenant_id = ? AND run_id = ? ORDER BY seq`, key)).rows;
      const results = (await this.q(`SELECT ${COMMAND_COLS} FROM kit_commands WHERE tenant_id = ? AND run_id = ? ` +
        "AND status IN ('completed', 'failed') AND consumed = 0 ORDER BY command_id", key)).rows;
      const signals = (await this.q(`SELECT ${SIGNAL_COLS} FROM kit_signals WHERE tenant_id = ? AND run_id = ? AND status = 'pending' ORDER BY signal_id`, key)).rows;
      const timers = (await this.q(`SELECT ${TIMER_COLS} FROM kit_timers WHERE tenant_id = ? AND run_id = ? AND status = 'fired' ORDER BY timer_id`, key)).rows;
      return { snapshot: { run: toRun(run), history: history.map(toEvent), command_results: results.map(toCommand), signals: signals.map(toSignal), timers: timers.map(toTimer) } };
    });
  }

  checkDecision(d) {
    const D = V.invalidDecision;
    if (d === null || typeof d !== 'object') throw D('expected a Decision');
    const status = d.next_status;
    if (!['pending', 'blocked', 'completed', 'failed', 'cancelled'].includes(status)) {
      throw D(`next_status ${JSON.stringify(status)} is not allowed: use pending, blocked or a terminal status`);
    }
    const list = (name) => { const v = d[name] === undefined ? [] : d[name]; if (!Array.isArray(v)) throw D(`${name} must be a list`); return v; };
    const events = list('events'); const commands = list('commands'); const timers = list('timers');
    if (TERMINAL.has(status) && (commands.length || timers.length)) throw D('a terminal decision cannot schedule commands or timers: drop them or choose pending/blocked');
    const has = (v) => v !== null && v !== undefined;
    if (has(d.wake_at) && has(d.wake_after)) throw D('give wake_at or wake_after, not both');
    const out = { status, events: [], commands: [], timers: [], wakeAt: null, wakeAfter: null };
    if (has(d.wake_at)) out.wakeAt = V.parseDt(d.wake_at, 'wake_at');
    if (has(d.wake_after)) out.wakeAfter = V.checkNonNegative('wake_after', d.wake_after);
    const seen = new Set();
    events.forEach((e, i) => {
      V.checkText(`events[${i}].kind`, e.kind, LIMITS.name);
      const payload = V.payloadText(`events[${i}].payload`, e.payload);
      const key = has(e.operation_key) ? V.checkText(`events[${i}].operation_key`, e.operation_key, LIMITS.key) : null;
      if (key !== null) { if (seen.has(key)) throw D(`events[${i}] repeats operation key ${key} within one decision`); seen.add(key); }
      out.events.push({ kind: e.kind, key, payload });
    });
    commands.forEach((c, i) => {
      V.checkText(`commands[${i}].operation_key`, c.operation_key, LIMITS.key);
      V.checkText(`commands[${i}].name`, c.name, LIMITS.name);
      const queue = c.queue === undefined ? 'default' : c.queue;
      V.checkText(`commands[${i}].queue`, queue, LIMITS.name);
      const input = V.payloadText(`commands[${i}].input`, c.input);
      const max = c.max_attempts === undefined ? 3 : c.max_attempts;
      if (!V.isInt(max) || V.toBig(max) < 1n) throw D(`commands[${i}].max_attempts must be an int >= 1`);
      const delay = c.delay === undefined ? 0n : V.checkNonNegative(`commands[${i}].delay`, c.delay);
      out.commands.push({ key: c.operation_key, name: c.name, queue, input, max: V.toBig(max), delay });
    });
    timers.forEach((t, i) => {
      V.checkText(`timers[${i}].operation_key`, t.operation_key, LIMITS.key);
      if (has(t.delay) === has(t.fire_at)) throw D(`timers[${i}] needs exactly one of delay or fire_at`);
      out.timers.push({ key: t.operation_key, delay: has(t.delay) ? V.checkNonNegative(`timers[${i}].delay`, t.delay) : null,
        fireAt: has(t.fire_at) ? V.parseDt(t.fire_at, `timers[${i}].fire_at`) : null });
    });
    for (const name of ['consume_signals', 'consume_commands', 'consume_timers', 'cancel_timers']) {
      const ids = list(name);
      for (const id of ids) if (typeof id !== 'string' || !id) throw D(`${name} holds ${JSON.stringify(id)}; ids are non-empty str`);
      if (new Set(ids).size !== ids.length) throw D(`${name} names the same id twice: list each once`);
      out[name] = ids;
    }
    if (out.consume_timers.some((t) => out.cancel_timers.includes(t))) throw D('a timer cannot be both consumed and cancelled by one decision');
    out.output = V.payloadText('output', d.output);
    out.error = V.payloadText('error', d.error);
    return out;
  }

  async commit_decision({ claim, expected_revision, decision }) {
    const c = this.claimFields(claim, 'RunClaim');
    if (!V.isInt(expected_revision)) throw V.invalid('expected_revision must be an int');
    const expected = V.toBig(expected_revision);
    const d = this.checkDecision(decision);
    return this.write(async () => {
      const run = await this.lockedRun(c.run_id);
      const now = await this.now();
      // Seeded bug: the commit checks the owner and the lease but not the claim generation.
      const refused = this.refuseRun(run, c, now, BUG === 'commit_ignores_generation');
      if (refused) return refused;
      if (BigInt(run.revision) !== expected) return 'revision_mismatch';
      await this.checkConsumable(run.run_id, d);
      const revision = BigInt(run.revision) + 1n;
      await this.appendEvents(run.run_id, revision, now, d.events);
      await this.schedule(run.run_id, now, d);
      await this.consume(revision, d);
      let status = d.status;
      let wake = d.wakeAt !== null ? d.wakeAt : (d.wakeAfter !== null ? now + d.wakeAfter : null);
      if (status === 'pending' && wake === null) wake = now;
      if (status === 'blocked' && Number(run.wakeup_pending) === 1) { status = 'pending'; wake = now; }
      if (TERMINAL.has(status)) { wake = null; await this.closeOutstanding(run.run_id); }
      // The fence: the final UPDATE repeats the generation the claim holds (seeded bug: it does not).
      const fence = BUG === 'commit_ignores_generation' ? '' : ' AND claim_generation = ?';
      const params = [status, revision, wake, wake, d.output, d.error, now, this.tenant, run.run_id, BigInt(run.revision)];
      if (fence) params.push(c.generation);
      const done = await this.q('UPDATE kit_runs SET status = ?, revision = ?, claim_owner = NULL, claim_expires_at = NULL, wake_at = ?, due_at = ?, ' +
        `wakeup_pending = 0, output = ?, error = ?, updated_at = ? WHERE tenant_id = ? AND run_id = ? AND revision = ?${fence}`, params);
      if (done.rowCount !== 1) throw new ContractError('StorageError', `the fenced update of run ${run.run_id} matched ${done.rowCount} rows`);
      return 'committed';
    });
  }

  async checkConsumable(runId, d) {
    const checks = [
      ['consume_signals', 'kit_signals', 'signal_id', "status = 'pending'", 'pending signals'],
      ['consume_commands', 'kit_commands', 'command_id', "status IN ('completed', 'failed') AND consumed = 0", 'unconsumed command results'],
      ['consume_timers', 'kit_timers', 'timer_id', "status = 'fired'", 'fired timers'],
      ['cancel_timers', 'kit_timers', 'timer_id', "status IN ('scheduled', 'fired')", 'open timers'],
    ];
    for (const [label, table, column, condition, what] of checks) {
      const values = d[label];
      if (!values.length) continue;
      for (const v of values) if (!/^\d+$/.test(v)) throw V.invalidDecision(`${label}: ${JSON.stringify(v)} is not an id this store issued`);
      const r = await this.q(`SELECT COUNT(*) AS n FROM ${table} WHERE tenant_id = ? AND run_id = ? AND ${condition} AND ${column} IN ${this.in(values)}`,
        [this.tenant, runId, ...values]);
      if (Number(r.rows[0].n) !== values.length) throw V.invalidDecision(`${label} names ids that are not ${what} of run ${runId}: ${JSON.stringify(values)}`);
    }
    const keys = d.events.filter((e) => e.key !== null).map((e) => e.key);
    if (keys.length) {
      const clash = (await this.q(`SELECT operation_key FROM kit_events WHERE tenant_id = ? AND run_id = ? AND operation_key IN ${this.in(keys)}`,
        [this.tenant, runId, ...keys])).rows;
      if (clash.length) throw V.invalidDecision(`events with operation keys ${JSON.stringify(clash.map((r) => r.operation_key))} are already in the history`);
    }
  }

  async appendEvents(runId, revision, now, events) {
    if (!events.length) return;
    const r = await this.q('SELECT COALESCE(MAX(seq), 0) AS seq FROM kit_events WHERE tenant_id = ? AND run_id = ?', [this.tenant, runId]);
    let seq = BigInt(r.rows[0].seq);
    for (const e of events) {
      seq += 1n;
      await this.q('INSERT INTO kit_events (tenant_id, run_id, seq, kind, operation_key, payload, revision, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
        [this.tenant, runId, seq, e.kind, e.key, e.payload, revision, now]);
    }
  }

  async schedule(runId, now, d) {
    if (d.commands.length) {
      const taken = new Set((await this.q('SELECT operation_key FROM kit_commands WHERE tenant_id = ? AND run_id = ?', [this.tenant, runId])).rows.map((r) => r.operation_key));
      for (const c of d.commands) {
        if (taken.has(c.key)) continue;
        taken.add(c.key);
        const notBefore = now + c.delay;
        await this.q('INSERT INTO kit_commands (tenant_id, run_id, operation_key, name, queue, input, status, attempt, max_attempts, not_before, ' +
          "claim_owner, claim_generation, claim_expires_at, due_at, result, error, consumed, created_at) VALUES (?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?, " +
          "NULL, 0, NULL, ?, 'null', 'null', 0, ?)", [this.tenant, runId, c.key, c.name, c.queue, c.input, c.max, notBefore, notBefore, now]);
      }
    }
    if (d.timers.length) {
      const taken = new Set((await this.q('SELECT operation_key FROM kit_timers WHERE tenant_id = ? AND run_id = ?', [this.tenant, runId])).rows.map((r) => r.operation_key));
      for (const t of d.timers) {
        if (taken.has(t.key)) continue;
        taken.add(t.key);
        const fireAt = t.fireAt !== null ? t.fireAt : now + t.delay;
        await this.q("INSERT INTO kit_timers (tenant_id, run_id, operation_key, fire_at, status, created_at) VALUES (?, ?, ?, ?, 'scheduled', ?)",
          [this.tenant, runId, t.key, fireAt, now]);
      }
    }
  }

  async consume(revision, d) {
    const updates = [
      ['consume_signals', "UPDATE kit_signals SET status = 'consumed', consumed_revision = ? WHERE tenant_id = ? AND signal_id IN ", true],
      ['consume_commands', 'UPDATE kit_commands SET consumed = 1 WHERE tenant_id = ? AND command_id IN ', false],
      ['consume_timers', "UPDATE kit_timers SET status = 'consumed' WHERE tenant_id = ? AND timer_id IN ", false],
      ['cancel_timers', "UPDATE kit_timers SET status = 'cancelled' WHERE tenant_id = ? AND timer_id IN ", false],
    ];
    for (const [label, sql, withRevision] of updates) {
      const ids = d[label];
      if (!ids.length) continue;
      const params = withRevision ? [revision, this.tenant, ...ids] : [this.tenant, ...ids];
      await this.q(sql + this.in(ids), params);
    }
  }

  async closeOutstanding(runId) {
    await this.q("UPDATE kit_commands SET status = 'cancelled', claim_expires_at = NULL, due_at = NULL WHERE tenant_id = ? AND run_id = ? " +
      "AND status IN ('pending', 'claimed')", [this.tenant, runId]);
    await this.q("UPDATE kit_timers SET status = 'cancelled' WHERE tenant_id = ? AND run_id = ? AND status = 'scheduled'", [this.tenant, runId]);
  }

  // -- commands -------------------------------------------------------------------------
  async claim_commands({ worker_id, lease, limit, queues }) {
    const [leaseUs, n] = this.checkClaim(worker_id, lease, limit);
    let queueList = null;
    if (queues !== null && queues !== undefined) {
      if (!Array.isArray(queues)) throw V.invalid('queues must be a list of queue names or None');
      queueList = queues.map((q) => V.checkText('queue', q, LIMITS.name));
      if (!queueList.length) return [];
    }
    return this.write(async () => {
      const now = await this.now();
      const expires = now + leaseUs;
      let where = 'tenant_id = ? AND due_at <= ?';
      const params = [this.tenant, now];
      if (queueList) { where += ` AND queue IN ${this.in(queueList)}`; params.push(...queueList); }
      const returning = COMMAND_COLS.split(',').map((c) => `c.${c.trim()}`).join(', ').replace(/c\.(\w+)::text/g, 'c.$1::text AS $1');
      const rows = (await this.q("UPDATE kit_commands AS c SET status = 'claimed', attempt = c.attempt + 1, claim_owner = ?, " +
        'claim_generation = c.claim_generation + 1, claim_expires_at = ?, due_at = ? ' +
        `FROM unnest(ARRAY(SELECT command_id FROM kit_commands WHERE ${where} ORDER BY due_at, command_id LIMIT ${n} FOR UPDATE SKIP LOCKED)) ` +
        `WITH ORDINALITY AS picked(id, position) WHERE c.tenant_id = ? AND c.command_id = picked.id RETURNING ${returning}, picked.position`,
      [worker_id, expires, expires, ...params, this.tenant])).rows;
      if (rows.length > n) throw new ContractError('StorageError', `a claim updated ${rows.length} rows for a limit of ${n}: rolled back`);
      rows.sort((a, b) => Number(a.position) - Number(b.position));
      return rows.map((r) => {
        const c = toCommand(r);
        return { command_id: c.command_id, run_id: c.run_id, worker_id, generation: c.claim_generation, expires_at: V.dtOut(expires),
          attempt: c.attempt, name: c.name, queue: c.queue, input: c.input, operation_key: c.operation_key };
      });
    });
  }

  async lockedCommand(commandId) {
    if (typeof commandId !== 'string' || !/^\d+$/.test(commandId)) return null;
    const r = await this.q(`SELECT ${COMMAND_COLS} FROM kit_commands WHERE tenant_id = ? AND command_id = ? FOR UPDATE`, [this.tenant, commandId]);
    return r.rows.length ? r.rows[0] : null;
  }

  async fencedCommand(claim) {
    const run = await this.lockedRun(claim.run_id);
    const command = await this.lockedCommand(claim.command_id);
    const now = await this.now();
    if (!command || command.run_id !== claim.run_id) return [run, null, now, 'not_found'];
    if (['completed', 'failed', 'cancelled'].includes(command.status)) return [run, command, now, 'terminal'];
    const live = command.status === 'claimed' && command.claim_owner === claim.worker_id && BigInt(command.claim_generation) === claim.generation &&
      command.claim_expires_at !== null && now < BigInt(command.claim_expires_at);
    return [run, command, now, live ? null : 'claim_lost'];
  }

  async heartbeat_command({ claim, lease }) {
    const c = this.claimFields(claim, 'CommandClaim');
    const leaseUs = V.checkLease(lease);
    return this.write(async () => {
      const [, , now, refused] = await this.fencedCommand(c);
      if (refused) return refused;
      await this.q('UPDATE kit_commands SET claim_expires_at = ?, due_at = ? WHERE tenant_id = ? AND command_id = ?', [now + leaseUs, now + leaseUs, this.tenant, c.command_id]);
      return 'renewed';
    });
  }

  async complete_command({ claim, result }) {
    const c = this.claimFields(claim, 'CommandClaim');
    const text = V.payloadText('result', result);
    return this.write(async () => {
      const [run, , now, refused] = await this.fencedCommand(c);
      if (refused) return refused;
      await this.q("UPDATE kit_commands SET status = 'completed', result = ?, claim_expires_at = NULL, due_at = NULL WHERE tenant_id = ? AND command_id = ?",
        [text, this.tenant, c.command_id]);
      if (run) await this.makeRunnable(run, now);
      return 'completed';
    });
  }

  async fail_command({ claim, error, retry_after, retryable }) {
    const c = this.claimFields(claim, 'CommandClaim');
    const text = V.payloadText('error', error);
    const delay = retry_after === null || retry_after === undefined ? 0n : V.checkNonNegative('retry_after', retry_after);
    const retry = retryable === undefined ? true : retryable;
    if (typeof retry !== 'boolean') throw V.invalid('retryable must be a bool');
    return this.write(async () => {
      const [run, command, now, refused] = await this.fencedCommand(c);
      if (refused) return refused;
      if (retry && Number(command.attempt) < Number(command.max_attempts)) {
        await this.q("UPDATE kit_commands SET status = 'pending', error = ?, claim_owner = NULL, claim_expires_at = NULL, not_before = ?, due_at = ? " +
          'WHERE tenant_id = ? AND command_id = ?', [text, now + delay, now + delay, this.tenant, c.command_id]);
        return 'retry_scheduled';
      }
      await this.q("UPDATE kit_commands SET status = 'failed', error = ?, claim_expires_at = NULL, due_at = NULL WHERE tenant_id = ? AND command_id = ?",
        [text, this.tenant, c.command_id]);
      if (run) await this.makeRunnable(run, now);
      return 'failed';
    });
  }

  async get_command({ command_id }) {
    if (typeof command_id !== 'string' || !/^\d+$/.test(command_id)) return null;
    return this.read(async () => {
      const r = await this.q(`SELECT ${COMMAND_COLS} FROM kit_commands WHERE tenant_id = ? AND command_id = ?`, [this.tenant, command_id]);
      return r.rows.length ? toCommand(r.rows[0]) : null;
    });
  }

  async list_commands({ run_id }) {
    return this.read(async () => (await this.q(`SELECT ${COMMAND_COLS} FROM kit_commands WHERE tenant_id = ? AND run_id = ? ORDER BY command_id`, [this.tenant, run_id])).rows.map(toCommand));
  }

  // -- signals ------------------------------------------------------------------------------
  async signalByKey(runId, key) {
    const r = await this.q(`SELECT ${SIGNAL_COLS} FROM kit_signals WHERE tenant_id = ? AND run_id = ? AND dedup_key = ?`, [this.tenant, runId, key]);
    return r.rows.length ? toSignal(r.rows[0]) : null;
  }

  async send_signal({ run_id, name, payload, dedup_key }) {
    V.checkText('run_id', run_id, LIMITS.runId);
    V.checkText('name', name, LIMITS.name);
    const text = V.payloadText('payload', payload);
    V.checkText('dedup_key', dedup_key, LIMITS.key);
    return this.write(async () => {
      const run = await this.lockedRun(run_id);
      if (!run) return { outcome: 'not_found', signal: null };
      const existing = await this.signalByKey(run_id, dedup_key);
      if (existing) return { outcome: 'duplicate', signal: existing };
      if (TERMINAL.has(run.status)) return { outcome: 'terminal', signal: null };
      const now = await this.now();
      await this.q("INSERT INTO kit_signals (tenant_id, run_id, name, payload, dedup_key, status, consumed_revision, sent_at) VALUES (?, ?, ?, ?, ?, 'pending', NULL, ?)",
        [this.tenant, run_id, name, text, dedup_key, now]);
      const signal = await this.signalByKey(run_id, dedup_key);
      await this.makeRunnable(run, now);
      return { outcome: 'committed', signal };
    });
  }

  async list_signals({ run_id }) {
    return this.read(async () => (await this.q(`SELECT ${SIGNAL_COLS} FROM kit_signals WHERE tenant_id = ? AND run_id = ? ORDER BY signal_id`, [this.tenant, run_id])).rows.map(toSignal));
  }

  // -- timers -------------------------------------------------------------------------------
  async fire_due_timers({ limit }) {
    const n = V.checkLimit(limit === undefined ? 100 : limit);
    return this.write(async () => {
      const now = await this.now();
      const fired = []; const lost = [];
      while (fired.length < n) {
        const skip = lost.length ? ` AND timer_id NOT IN ${this.in(lost)}` : '';
        const due = (await this.q(`SELECT timer_id, run_id FROM kit_timers WHERE tenant_id = ? AND status = 'scheduled' AND fire_at <= ?${skip} ` +
          `ORDER BY fire_at, timer_id LIMIT ${n - fired.length}`, [this.tenant, now, ...lost])).rows;
        if (!due.length) break;
        for (const t of due) {
          const run = await this.lockedRun(t.run_id);
          const changed = (await this.q("UPDATE kit_timers SET status = 'fired' WHERE tenant_id = ? AND timer_id = ? AND status = 'scheduled' AND fire_at <= ?",
            [this.tenant, t.timer_id, now])).rowCount;
          if (changed !== 1) { lost.push(String(t.timer_id)); continue; }
          if (run) await this.makeRunnable(run, now);
          fired.push(String(t.timer_id));
        }
      }
      if (!fired.length) return [];
      const rows = (await this.q(`SELECT ${TIMER_COLS} FROM kit_timers WHERE tenant_id = ? AND timer_id IN ${this.in(fired)}`, [this.tenant, ...fired])).rows;
      const byId = new Map(rows.map((r) => [String(r.timer_id), toTimer(r)]));
      return fired.map((id) => byId.get(id));
    });
  }

  async list_timers({ run_id }) {
    return this.read(async () => (await this.q(`SELECT ${TIMER_COLS} FROM kit_timers WHERE tenant_id = ? AND run_id = ? ORDER BY timer_id`, [this.tenant, run_id])).rows.map(toTimer));
  }

  // A network drop: the socket closes without a goodbye; the server rolls the open transaction back
  // when it notices, and this store's next statement fails with ConnectionLost.
  dropConnection() {
    this.client.dead = this.client.dead || 'the connection was dropped (network fault)';
    const stream = this.client.connection && this.client.connection.stream;
    if (stream) stream.destroy();
    return null;
  }

  async close() {
    this.closed = true;
    try { await this.client.end(); } catch (e) { /* already gone */ }
    return null;
  }
}

module.exports = { Store, connect, translate, loadMigrations, checksum, SCHEMA_MARK, KILL_TIMEOUT_MS };
