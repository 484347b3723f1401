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

export function freshSchemaName(): string {
  return `t_${randomBytes(6).toString('hex')}`;
}

export async function dropSchema(schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: withDefaultUser(testPgUrl) });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await client.end();
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
      await dropSchema(schema);
    },
  };
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
