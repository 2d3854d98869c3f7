#!/usr/bin/env node
'use strict';
// The reference store for the kit's wire protocol, version 1 (docs/wire-protocol.md), in Node.js
// over PostgreSQL with the `pg` package. Speaks newline-delimited JSON on stdin/stdout, or on TCP
// with `--listen PORT` (one client at a time per connection, any number of connections).
//
//   kit check exec:'node stores/node-postgres/store.js'
//
// The database: KIT_POSTGRES_URL, else PGHOST/PGPORT/PGUSER/PGDATABASE, else postgres@127.0.0.1:5432.
// KIT_NODE_STORE_BUG=commit_ignores_generation seeds a bug (the kit must catch it).
const crypto = require('crypto');
const net = require('net');
const readline = require('readline');
const { Store, connect, translate, loadMigrations, checksum, SCHEMA_MARK, KILL_TIMEOUT_MS } = require('./lib/pgstore');
const V = require('./lib/values');

const { ContractError } = V;
const PROTOCOL = 1;
const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;
const CAPABILITIES = ['skip_locked', 'test_clock', 'database_clock', 'tenancy', 'unit_of_work', 'kill_session',
  'concurrent_connections', 'statement_faults'];
const STORE_OPS = new Set(['close', 'migrate', 'verify_schema', 'now', 'set_test_clock', 'advance_test_clock', 'ensure_definition',
  'get_definition', 'list_definition_versions', 'start_run', 'get_run', 'list_runs', 'request_cancel', 'get_history', 'claim_runs', 'renew_run_claim',
  'release_run_claim', 'load_claimed', 'commit_decision', 'claim_commands', 'heartbeat_command', 'complete_command', 'fail_command',
  'get_command', 'list_commands', 'send_signal', 'list_signals', 'fire_due_timers', 'list_timers', 'begin', 'commit', 'rollback',
  'lock_run', 'drop_connection']);
const BACKEND_OPS = new Set(['hello', 'provision', 'drop', 'reset', 'open', 'kill_session']);
// Every promise family of the contract: this store withholds none.
const PROMISES = ['leases', 'generation_fencing', 'expected_revision', 'atomic_decision', 'wake_on_input', 'commands',
  'signals', 'timers', 'definitions', 'cancel_requests', 'tenancy', 'unit_of_work', 'schema_checksums'];

const quote = (text) => JSON.stringify(text.length > 120 ? `${text.slice(0, 120)}...` : text);

class Server {
  constructor(write) {
    this.write = write;
    this.databases = new Map(); // handle -> { namespace, stores: Map }
    this.stores = new Map(); // handle -> Store
    this.admin = null;
    this.seen = new Set(); // request ids used on this connection
    this.pending = new Map(); // our fault_point ids -> resolver
    this.nextId = 1;
    this.hello = false;
    this.inflight = new Set();
  }

  send(message) { this.write(`${JSON.stringify(message)}\n`); }

  protocolError(id, message) { this.send({ id: id === undefined ? null : id, error: { type: 'ProtocolError', message } }); }

  // One line from the kit.
  line(text) {
    if (!text.trim()) return;
    if (Buffer.byteLength(text, 'utf8') > MAX_MESSAGE_BYTES) {
      this.protocolError(null, `a message of ${Buffer.byteLength(text, 'utf8')} bytes exceeds the protocol's ${MAX_MESSAGE_BYTES}: ${quote(text)}`);
      return;
    }
    let msg;
    try { msg = JSON.parse(text); } catch (e) { this.protocolError(null, `malformed JSON (${e.message}): ${quote(text)}`); return; }
    if (msg === null || typeof msg !== 'object' || Array.isArray(msg)) { this.protocolError(null, `a message must be a JSON object: ${quote(text)}`); return; }
    const { id } = msg;
    if (!(typeof id === 'string' || Number.isInteger(id))) { this.protocolError(null, `a message needs an integer or string "id": ${quote(text)}`); return; }
    if (!('op' in msg)) { this.response(msg, text); return; }
    if (this.seen.has(id)) { this.protocolError(id, `request id ${JSON.stringify(id)} was already used: every request needs a new id: ${quote(text)}`); return; }
    this.seen.add(id);
    if (typeof msg.op !== 'string') { this.protocolError(id, `"op" must be a string: ${quote(text)}`); return; }
    const args = msg.args === undefined ? {} : msg.args;
    if (args === null || typeof args !== 'object' || Array.isArray(args)) { this.protocolError(id, `"args" must be an object: ${quote(text)}`); return; }
    const done = this.dispatch(id, msg.op, args, text).then(
      (ok) => this.send({ id, ok: ok === undefined ? null : ok }),
      (e) => {
        const t = translate(e);
        this.send({ id, error: { type: t.type, message: t.message, ...t.extra } });
      },
    );
    this.inflight.add(done);
    done.finally(() => this.inflight.delete(done));
  }

  // A response to one of our fault_point requests.
  response(msg, text) {
    const resolve = this.pending.get(msg.id);
    if (!resolve) { this.protocolError(null, `a response to a request this store never sent (id ${JSON.stringify(msg.id)}): ${quote(text)}`); return; }
    this.pending.delete(msg.id);
    resolve(msg);
  }

  faultPoint(call, store, statement) {
    const id = `f${this.nextId++}`;
    return new Promise((resolve, reject) => {
      this.pending.set(id, (msg) => {
        if (msg.error) reject(new ContractError('StorageError', `the kit failed this statement (${msg.error.type}: ${msg.error.message})`));
        else resolve();
      });
      this.send({ id, op: 'fault_point', args: { call, store, statement } });
    });
  }

  async dispatch(id, op, args, text) {
    if (op === 'hello') this.hello = true;
    else if (!this.hello) throw new ContractError('ProtocolError', `the first request must be hello, not ${op}`);
    if (BACKEND_OPS.has(op)) return this[`op_${op}`](args, id);
    if (!STORE_OPS.has(op)) {
      throw new ContractError('UnknownOperation', `unknown operation ${JSON.stringify(op)} in ${quote(text)}: wire protocol ${PROTOCOL} has ` +
        `${[...BACKEND_OPS, ...STORE_OPS].join(', ')}`);
    }
    const store = this.stores.get(args.store);
    if (!store && op === 'close') return null; // closing twice (or after drop) is harmless
    if (!store) throw V.invalid(`no open store ${JSON.stringify(args.store)}: open one first (or it was closed)`);
    if (op === 'close') { this.stores.delete(args.store); return store.close(); }
    // May arrive from inside a fault point of the store's own call: it must not take that call's place.
    if (op === 'drop_connection') return store.dropConnection();
    store.call = id;
    if (op === 'now') return store.now_op();
    if (['begin', 'commit', 'rollback'].includes(op)) return store[op]();
    if (op !== 'lock_run' && op !== 'migrate' && op !== 'verify_schema') store.checkOpen();
    return store[op](args);
  }

  async withAdmin(fn) {
    if (!this.admin || this.admin.dead) this.admin = await connect(null);
    return fn(this.admin);
  }

  // -- backend operations ---------------------------------------------------------------
  async op_hello(args) {
    if (args.protocol !== PROTOCOL) throw new ContractError('ProtocolError', `this store speaks wire protocol ${PROTOCOL}, not ${JSON.stringify(args.protocol)}`);
    const version = await this.withAdmin(async (c) => (await c.query("SELECT current_setting('server_version') AS v")).rows[0].v);
    this.hello = true;
    return {
      protocol: PROTOCOL, name: 'node-postgres', version: require('./package.json').version,
      describe: `Node.js ${process.version}, pg ${require('pg/package.json').version}, PostgreSQL ${version}`,
      capabilities: CAPABILITIES, clock_resolution_us: 1, expected_failures: {}, promises: PROMISES,
    };
  }

  async op_provision() {
    const namespace = `kit_${crypto.randomBytes(6).toString('hex')}`;
    await this.withAdmin(async (c) => {
      await c.query('BEGIN');
      try {
        await c.query(`CREATE SCHEMA ${namespace}`);
        await c.query(`COMMENT ON SCHEMA ${namespace} IS '${SCHEMA_MARK}'`);
        await c.query('COMMIT');
      } catch (e) { await c.query('ROLLBACK').catch(() => {}); throw e; }
    });
    this.databases.set(namespace, { namespace, server: this });
    return { database: namespace, label: `PostgreSQL schema ${namespace}` };
  }

  database(args) {
    const db = this.databases.get(args.database);
    if (!db) throw V.invalid(`no database ${JSON.stringify(args.database)} was provisioned on this connection`);
    return db;
  }

  async op_drop(args) {
    const db = this.database(args);
    for (const [handle, store] of this.stores) if (store.db === db) { this.stores.delete(handle); await store.close(); }
    await this.withAdmin(async (c) => {
      await c.query('SELECT pg_terminate_backend(pid, $1::bigint) FROM pg_catalog.pg_stat_activity WHERE application_name = $2 AND pid <> pg_backend_pid()',
        [KILL_TIMEOUT_MS, `kit:${db.namespace}`]);
      const r = await c.query("SELECT obj_description(oid, 'pg_namespace') AS mark FROM pg_catalog.pg_namespace WHERE nspname = $1", [db.namespace]);
      if (r.rows.length && r.rows[0].mark === SCHEMA_MARK) await c.query(`DROP SCHEMA ${db.namespace} CASCADE`);
    });
    this.databases.delete(args.database);
    return null;
  }

  async op_reset(args) {
    const db = this.database(args);
    const store = await this.openStore(db, 'default', 'test', null, false);
    try { await store.emptyAll(); } finally { await store.close(); }
    return null;
  }

  async openStore(db, tenant, clock, migrations, faults, call) {
    const client = await connect(db.namespace).catch((e) => { throw translate(e); });
    const store = new Store(db, client, tenant, clock, migrations || loadMigrations(), faults);
    store.id = `s${this.nextId++}`;
    store.call = call;
    if (clock === 'test') {
      try { await store.installTestClock(); } catch (e) { await store.close(); throw e; }
    }
    return store;
  }

  async op_open(args, id) {
    const db = this.database(args);
    const tenant = V.checkText('tenant_id', args.tenant_id === undefined ? 'default' : args.tenant_id, V.LIMITS.tenant);
    const clock = args.clock === undefined ? 'test' : args.clock;
    if (clock !== 'test' && clock !== 'database') throw V.invalid(`clock must be "test" or "database", got ${JSON.stringify(clock)}`);
    let migrations = null;
    if (args.migrations !== null && args.migrations !== undefined) {
      if (!Array.isArray(args.migrations)) throw V.invalid('migrations must be a list or null');
      migrations = args.migrations.map((m, i) => {
        if (!m || !Number.isInteger(m.version) || typeof m.name !== 'string' || typeof m.sql !== 'string') {
          throw V.invalid(`migrations[${i}] needs an integer version, a name and sql`);
        }
        return { version: m.version, name: m.name, sql: m.sql, checksum: typeof m.checksum === 'string' ? m.checksum : checksum(m.sql) };
      });
    }
    const store = await this.openStore(db, tenant, clock, migrations, args.faults === true, id);
    store.call = id;
    this.stores.set(store.id, store);
    return { store: store.id, session: store.client.processID, migrations: store.migrations };
  }

  async op_kill_session(args) {
    this.database(args);
    const store = this.stores.get(args.store);
    if (!store) throw V.invalid(`no open store ${JSON.stringify(args.store)}`);
    const pid = store.client.processID;
    await this.withAdmin(async (c) => {
      const r = await c.query('SELECT pg_terminate_backend(pid, $1::bigint) AS ended FROM pg_catalog.pg_stat_activity ' +
        "WHERE pid = $2::integer AND starts_with(application_name, 'kit:')", [KILL_TIMEOUT_MS, pid]);
      if (r.rows.length && !r.rows[0].ended) throw new ContractError('StorageError', `PostgreSQL session ${pid} did not end within ${KILL_TIMEOUT_MS} ms`);
    });
    return null;
  }

  async shutdown() {
    while (this.inflight.size) await Promise.allSettled([...this.inflight]);
    for (const store of this.stores.values()) await store.close();
    for (const handle of [...this.databases.keys()]) await this.op_drop({ database: handle }).catch(() => {});
    if (this.admin) await this.admin.end().catch(() => {});
  }
}

function serve(input, output, onEnd) {
  const server = new Server((text) => output.write(text));
  const rl = readline.createInterface({ input, crlfDelay: Infinity });
  rl.on('line', (text) => server.line(text));
  rl.on('close', () => { server.shutdown().finally(onEnd); });
  return server;
}

function main() {
  const at = process.argv.indexOf('--listen');
  if (at >= 0) {
    const port = Number(process.argv[at + 1]);
    const tcp = net.createServer((socket) => serve(socket, socket, () => socket.end()));
    tcp.listen(port, '127.0.0.1', () => process.stderr.write(`node-postgres store: wire protocol ${PROTOCOL} on 127.0.0.1:${tcp.address().port}\n`));
    return;
  }
  serve(process.stdin, process.stdout, () => process.exit(0));
}

process.on('unhandledRejection', (e) => { process.stderr.write(`unhandled rejection: ${e && e.stack ? e.stack : e}\n`); });
main();
