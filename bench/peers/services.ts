/**
 * The services the peers and tickler-on-PostgreSQL run against: a fresh PostgreSQL database
 * per run (dropped afterwards, so no run sees another's rows), Redis, and the one wall clock
 * every handler start and due time are read from. Reachability probes let the smoke test and
 * `--system all` skip a system whose service is down with a stated reason instead of failing.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { SystemClock } from '../../src/clock.js';

/** The harness's view of real time; handlers in this process and in child workers read the same system clock. */
export const wallClock = new SystemClock();

/** Base URL without a database; the user is explicit because the machine's OS user has no role. */
export const postgresBaseUrl = (process.env['PEERS_PG_URL'] ?? 'postgres://postgres@127.0.0.1:5432').replace(/\/+$/, '');
export const redisHost = process.env['PEERS_REDIS_HOST'] ?? '127.0.0.1';
export const redisPort = Number(process.env['PEERS_REDIS_PORT'] ?? '6379');

const probeTimeoutMs = 2_000;

export interface FreshDatabase {
  readonly name: string;
  readonly url: string;
  drop(): Promise<void>;
}

async function withAdminClient<T>(action: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: `${postgresBaseUrl}/postgres`, connectionTimeoutMillis: probeTimeoutMs });
  await client.connect();
  try {
    return await action(client);
  } finally {
    await client.end();
  }
}

/** Creates an empty database named after the system; `drop()` forces out any session still connected. */
export async function createFreshDatabase(prefix: string): Promise<FreshDatabase> {
  const name = `peers_${prefix.replace(/[^a-z0-9]/g, '_')}_${randomBytes(4).toString('hex')}`;
  await withAdminClient((client) => client.query(`CREATE DATABASE ${name}`));
  return {
    name,
    url: `${postgresBaseUrl}/${name}`,
    drop: async () => {
      await withAdminClient((client) => client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
    },
  };
}

export async function databaseSizeBytes(name: string): Promise<number> {
  return withAdminClient(async (client) => {
    const result = await client.query<{ size: string }>('SELECT pg_database_size($1)::text AS size', [name]);
    return Number(result.rows[0]!.size);
  });
}

/** Undefined when PostgreSQL answers; otherwise why systems on it are skipped. */
export async function postgresUnavailableReason(): Promise<string | undefined> {
  try {
    await withAdminClient((client) => client.query('SELECT 1'));
    return undefined;
  } catch (error) {
    return `PostgreSQL not reachable at ${postgresBaseUrl} (${(error as Error).message})`;
  }
}

/** Undefined when Redis answers PING; otherwise why BullMQ is skipped. */
export function redisUnavailableReason(): Promise<string | undefined> {
  return redisPingFailure(redisHost, redisPort);
}

/** Undefined when the Redis at `host`:`port` answers PING; otherwise why not. A raw RESP PING, so no client is needed. */
export async function redisPingFailure(host: string, port: number): Promise<string | undefined> {
  const { createConnection } = await import('node:net');
  return new Promise((resolve) => {
    const socket = createConnection({ host, port });
    const fail = (why: string): void => {
      socket.destroy();
      resolve(`Redis not reachable at ${host}:${port} (${why})`);
    };
    socket.setTimeout(probeTimeoutMs, () => fail('timeout'));
    socket.on('error', (error) => fail(error.message));
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (chunk) => {
      socket.destroy();
      if (chunk.toString().startsWith('+PONG')) resolve(undefined);
      else resolve(`Redis at ${host}:${port} answered ${JSON.stringify(chunk.toString().slice(0, 40))}`);
    });
  });
}
