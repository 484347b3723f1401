// PostgreSQL test harness: a fresh schema per store opened (dropped afterwards), peers on
// the same schema for the racing tests, and one reachability probe that turns into a clear
// skip reason, unless TICKLER_REQUIRE_PG=1 makes an unreachable server a failure.
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import net from 'node:net';
import pg from 'pg';
import { withDefaultUser } from '../../src/store/postgres/connection.js';
import { openPostgresStore, type PostgresStore, type PostgresStoreOptions } from '../../src/store/postgres/index.js';
import type { StoreHandle } from './conformance-fixtures.js';

export const testPgUrl = process.env['TICKLER_TEST_PG'] ?? 'postgres://127.0.0.1:5432/test';

let probe: Promise<string | undefined> | undefined;

/** Undefined when PostgreSQL answers; otherwise why the PostgreSQL tests are skipped. */
export function postgresSkipReason(): Promise<string | undefined> {
  probe ??= (async () => {
    const client = new pg.Client({ connectionString: withDefaultUser(testPgUrl), connectionTimeoutMillis: 2_000 });
    try {
      await client.connect();
      await client.query('SELECT 1');
      return undefined;
    } catch (error) {
      const reason = `PostgreSQL not reachable at ${testPgUrl} (${(error as Error).message}); `
        + 'set TICKLER_TEST_PG, or TICKLER_REQUIRE_PG=1 to make this a failure';
      if (process.env['TICKLER_REQUIRE_PG'] === '1') throw new Error(reason, { cause: error });
      return reason;
    } finally {
      await client.end().catch(() => undefined);
    }
  })();
  return probe;
}

/** Runs one statement as the test server's default user, outside any test schema (CREATE DATABASE, DROP DATABASE). */
export async function adminQuery(sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: withDefaultUser(testPgUrl) });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

export function freshSchemaName(): string {
  return `t_${randomBytes(6).toString('hex')}`;
}

export async function dropSchema(schema: string): Promise<void> {
  await adminQuery(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
}

// The racing tests queue their contenders behind a third connection's row lock, in a known
// order, by watching PostgreSQL's lock table.

/** Backends waiting for a lock that `blockerPid` (or a backend it blocks) holds, other than `except`. */
export async function blockedBehind(client: pg.Client, blockerPid: number, except: number[] = []): Promise<number[]> {
  // Inside a transaction pg_stat_activity is read once and kept: read it afresh each time.
  await client.query('SELECT pg_stat_clear_snapshot()');
  const result = await client.query<{ pid: number }>(
    `SELECT pid FROM pg_stat_activity
      WHERE pid <> ALL($2::int[]) AND cardinality(pg_blocking_pids(pid)) > 0
        AND (pg_blocking_pids(pid) && ARRAY[$1::int] OR pg_blocking_pids(pid) && $2::int[])`, [blockerPid, except]);
  return result.rows.map((row) => row.pid);
}

export async function until<T>(probe: () => Promise<T[]>, count: number): Promise<T[]> {
  // Polls another process's state (PostgreSQL's lock table), not the passing of time.
  for (let tries = 0; tries < 2_000; tries++) {
    const found = await probe();
    if (found.length >= count) return found;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  throw new Error(`fewer than ${count} backends ever waited`);
}

/**
 * A test store and a third connection holding one row's lock, so that contenders queue behind
 * it in a known order: `lock` takes the row's lock in a transaction, each `queue` starts a call
 * and waits until it is blocked behind the lock (or behind those queued before it), `release`
 * commits, and the calls get the lock in the order they were queued.
 */
export async function withRowLockQueue(body: (handle: PostgresHandle, queue: RowLockQueue) => Promise<void>): Promise<void> {
  const handle = await openTestStore();
  const locker = new pg.Client({ connectionString: withDefaultUser(testPgUrl) });
  await locker.connect();
  try {
    const lockerPid = (await locker.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    await body(handle, new RowLockQueue(locker, lockerPid, handle.schema));
  } finally {
    await locker.end();
    await handle.cleanup();
  }
}

export class RowLockQueue {
  private readonly queuedPids: number[] = [];

  constructor(private readonly locker: pg.Client, private readonly lockerPid: number, private readonly schema: string) {}

  async lock(table: 'jobs' | 'runs', id: string): Promise<void> {
    await this.locker.query('BEGIN');
    await this.locker.query(`SELECT 1 FROM "${this.schema}".${table} WHERE ${table === 'jobs' ? 'job_id' : 'run_id'} = $1 FOR UPDATE`, [id]);
  }

  /**
   * Starts `call` and answers once its backend waits behind the lock, with the call's promise
   * in `done` (in an object: an async function answering a promise would wait for it).
   */
  async queue<T>(call: () => Promise<T>): Promise<{ done: Promise<T> }> {
    const done = call();
    done.catch(() => undefined); // awaited by the test; not unhandled meanwhile
    const [pid] = await until(() => blockedBehind(this.locker, this.lockerPid, this.queuedPids), 1);
    this.queuedPids.push(pid!);
    return { done };
  }

  async release(): Promise<void> {
    await this.locker.query('COMMIT');
  }
}

export interface PostgresHandle extends StoreHandle {
  store: PostgresStore;
  schema: string;
  openPeer(): Promise<PostgresStore>;
}

/**
 * A store on a fresh schema. Virtual time by default (`useDatabaseClock: false`), as the
 * conformance suite passes its own `nowMs` everywhere.
 */
export async function openTestStore(options: Partial<PostgresStoreOptions> = {}): Promise<PostgresHandle> {
  const schema = options.schema ?? freshSchemaName();
  const storeOptions: PostgresStoreOptions = { useDatabaseClock: false, poolSize: 4, ...options, url: options.url ?? testPgUrl, schema };
  const store = await openPostgresStore(storeOptions);
  const peers: PostgresStore[] = [];
  return {
    store,
    schema,
    openPeer: async () => {
      const peer = await openPostgresStore(storeOptions);
      peers.push(peer);
      return peer;
    },
    cleanup: async () => {
      await Promise.all([store, ...peers].map((opened) => opened.close()));
      try {
        await assertActiveRunsQueued(schema);
      } finally {
        await dropSchema(schema);
      }
    },
  };
}

/**
 * active_runs (schema version 3) is the queue the leases, expiries and overlap policies read:
 * it must hold one row for each ready, running or retry_wait run, agreeing with the run on
 * status, hold and due time (ready_at, or the lease's expiry while running), and no other
 * row. Checked after every test that opens a store this way, which between them take runs
 * through every transition.
 */
export async function assertActiveRunsQueued(schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: withDefaultUser(testPgUrl) });
  await client.connect();
  try {
    const mismatched = await client.query(
      `SELECT r.run_id, r.status, q.status AS queued_status
         FROM (SELECT * FROM "${schema}".runs WHERE status IN ('ready', 'running', 'retry_wait')) r
              FULL JOIN "${schema}".active_runs q ON q.run_id = r.run_id
        WHERE r.run_id IS NULL OR q.run_id IS NULL OR q.status <> r.status OR q.held <> r.held
           OR (q.job_id, q.team, q.pool, q.lane) IS DISTINCT FROM (r.job_id, r.team, r.pool, r.lane)
           OR q.due_at IS DISTINCT FROM (CASE WHEN r.status = 'running' THEN r.lease_expires_at ELSE r.ready_at END)`);
    if (mismatched.rows.length > 0) {
      throw new Error(`active_runs disagrees with runs: ${JSON.stringify(mismatched.rows)}`);
    }
  } finally {
    await client.end();
  }
}

/** A store on a fresh schema that reaches PostgreSQL through a proxy the test can stop and restart. */
export async function openTestStoreBehindProxy(): Promise<{ handle: PostgresHandle; proxy: Awaited<ReturnType<typeof startProxy>> }> {
  const proxy = await startProxy(new URL(testPgUrl));
  const url = new URL(testPgUrl);
  url.port = String(proxy.port);
  return { handle: await openTestStore({ url: url.toString() }), proxy };
}

/** A TCP proxy to PostgreSQL that can drop every connection and refuse new ones, then come back. */
export async function startProxy(target: URL): Promise<{ port: number; stop(): Promise<void>; restart(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  let server: net.Server | null = null;
  let port = 0;
  const listen = async (): Promise<void> => {
    const created = net.createServer((client) => {
      const upstream = net.connect(Number(target.port || 5432), target.hostname);
      for (const socket of [client, upstream]) {
        sockets.add(socket);
        socket.on('close', () => sockets.delete(socket));
        socket.on('error', () => {
          client.destroy();
          upstream.destroy();
        });
      }
      client.pipe(upstream);
      upstream.pipe(client);
    });
    created.listen(port, '127.0.0.1');
    await once(created, 'listening');
    port = (created.address() as net.AddressInfo).port;
    server = created;
  };
  await listen();
  return {
    get port() {
      return port;
    },
    stop: async () => {
      const current = server;
      server = null;
      for (const socket of sockets) socket.destroy();
      if (current !== null) {
        current.close();
        await once(current, 'close');
      }
    },
    restart: listen,
  };
}
