/**
 * The database of a chaos run. The restart fault needs a PostgreSQL server of the run's own —
 * a private cluster (`pg_createcluster 15 chaos --port 55432`), restarted with
 * `pg_ctlcluster ... restart -m immediate` — because the shared server on 5432 serves
 * everyone else's tests and is never restarted. Where no private cluster can be made, the run
 * falls back to a fresh database on the shared server and leaves the restart fault out, and
 * says so. Every run gets a fresh database, dropped at the end unless kept for inspection.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import pg from 'pg';
import { withDefaultUser } from '../src/store/postgres/connection.js';

const run = promisify(execFile);

export interface ChaosDatabase {
  /** The store URL the nodes use. */
  url: string;
  /** Restarts the server with `-m immediate`; null where restarting is not ours to do. */
  restart: (() => Promise<void>) | null;
  /** Why the restart fault is missing, when it is. */
  note: string | null;
  drop(): Promise<void>;
}

export interface PrivateClusterSpec {
  version: string;
  name: string;
  port: number;
}

export const privateClusterDefault: PrivateClusterSpec = { version: '15', name: 'chaos', port: 55432 };
/**
 * The shared server, named with this process's user where the environment names none: pg
 * takes the user from PGUSER or USER, and a CI shell may set neither (its chaos run failed
 * with "no PostgreSQL user name specified in startup packet").
 */
function sharedServerUrl(): string {
  return withDefaultUser('postgres://127.0.0.1:5432/postgres');
}

function ctl(cluster: PrivateClusterSpec, action: string, ...extra: string[]): Promise<{ stdout: string }> {
  return run('pg_ctlcluster', ['--skip-systemctl-redirect', cluster.version, cluster.name, action, ...extra],
    { timeout: 60_000 });
}

/** Creates the private cluster once, and starts it if it is down. */
export async function ensurePrivateCluster(cluster: PrivateClusterSpec): Promise<string> {
  const { stdout } = await run('pg_lsclusters', ['--no-header'], { timeout: 10_000 });
  const line = stdout.split('\n').map((text) => text.trim().split(/\s+/))
    .find((fields) => fields[0] === cluster.version && fields[1] === cluster.name);
  if (line === undefined) {
    await run('pg_createcluster', [cluster.version, cluster.name, '--port', String(cluster.port), '--', '--auth=trust'],
      { timeout: 120_000 });
  } else if (line[2] !== String(cluster.port)) {
    throw new Error(`cluster ${cluster.version}/${cluster.name} exists on port ${line[2]}, not ${cluster.port}`);
  }
  if (line === undefined || line[3] !== 'online') await ctl(cluster, 'start');
  return `postgres://postgres@127.0.0.1:${cluster.port}`;
}

/** A failed command's first line and its stderr's telling lines, on one line: the why of a failed start is there. */
function whyCommandFailed(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const stderr = (error as Error & { stderr?: unknown }).stderr;
  const lines = typeof stderr === 'string' ? stderr.split('\n').map((line) => line.trim()).filter((line) => line !== '') : [];
  const telling = lines.filter((line) => /FATAL|ERROR|could not|Error:/.test(line));
  const printed = (telling.length > 0 ? telling : lines).join(' / ').slice(0, 600);
  const first = error.message.split('\n')[0] ?? '';
  return printed === '' || first.includes(printed) ? first : `${first}: ${printed}`;
}

async function withClient<T>(url: string, work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

async function createDatabase(serverUrl: string, name: string): Promise<string> {
  const adminUrl = new URL(serverUrl);
  adminUrl.pathname = '/postgres';
  await withClient(adminUrl.toString(), (client) => client.query(`CREATE DATABASE "${name}"`));
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

async function dropDatabase(serverUrl: string, name: string): Promise<void> {
  const adminUrl = new URL(serverUrl);
  adminUrl.pathname = '/postgres';
  await withClient(adminUrl.toString(), (client) => client.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`));
}

/**
 * A fresh database: on `serverUrl` when given (no restart fault: that server is not ours),
 * else on the private cluster, else on the shared server.
 */
export async function prepareDatabase(options: { name: string; serverUrl?: string; cluster?: PrivateClusterSpec;
  log: (message: string) => void }): Promise<ChaosDatabase> {
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(options.name)) throw new RangeError(`bad database name ${options.name}`);
  if (options.serverUrl !== undefined) {
    const serverUrl = withDefaultUser(options.serverUrl);
    const url = await createDatabase(serverUrl, options.name);
    return { url, restart: null, note: 'the restart fault is left out: --pg-url names a server this run does not own',
      drop: () => dropDatabase(serverUrl, options.name) };
  }
  const cluster = options.cluster ?? privateClusterDefault;
  let clusterUrl: string;
  try {
    clusterUrl = await ensurePrivateCluster(cluster);
  } catch (error) {
    const reason = whyCommandFailed(error);
    options.log(`no private PostgreSQL cluster (${reason}); using the shared server without the restart fault`);
    const serverUrl = sharedServerUrl();
    const url = await createDatabase(serverUrl, options.name);
    return { url, restart: null, note: `the restart fault is left out: no private cluster (${reason})`,
      drop: () => dropDatabase(serverUrl, options.name) };
  }
  const url = await createDatabase(clusterUrl, options.name);
  return {
    url,
    restart: async () => {
      await ctl(cluster, 'restart', '-m', 'immediate');
    },
    note: null,
    drop: () => dropDatabase(clusterUrl, options.name),
  };
}
