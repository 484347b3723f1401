/**
 * The database of a chaos run. The restart fault needs a PostgreSQL server of the run's own —
 * a private cluster, restarted with `pg_ctlcluster ... restart -m immediate` — because the
 * shared server on 5432 serves everyone else's tests and is never restarted. Each run makes
 * its own cluster (`pg_createcluster 15 chaos_p<pid>_<random> --port <free port>`: its own
 * data directory and port), so two runs on one machine never restart each other's database,
 * and drops it at the end; a cluster left by a run that died is dropped by the next run.
 * Where no private cluster can be made, the run falls back to a fresh database on the shared
 * server and leaves the restart fault out, and says so. Every run gets a fresh database,
 * dropped at the end unless kept for inspection.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, writeFileSync } from 'node:fs';
import { promisify } from 'node:util';
import pg from 'pg';
import { withDefaultUser } from '../src/store/postgres/connection.js';
import { drawFreePort } from './ports.js';
import { pidAlive } from './supervisor.js';

const run = promisify(execFile);

export interface ChaosDatabase {
  /** The store URL the nodes use. */
  url: string;
  /** Restarts the server with `-m immediate`; null where restarting is not ours to do. */
  restart: (() => Promise<void>) | null;
  /** Why the restart fault is missing, when it is. */
  note: string | null;
  drop(): Promise<void>;
  /** Leaves the database (and its cluster, running) for inspection; says how to drop it. */
  keep(): string;
}

export interface PrivateClusterSpec {
  version: string;
  name: string;
  port: number;
}

const clusterVersionDefault = '15';
/** The names of the clusters chaos runs make: the pid says whether the run that made one is alive. */
const clusterNamePattern = /^chaos_p(\d+)_[0-9a-f]+$/;
/** In a cluster's configuration directory: kept for inspection (`--keep-db`), not swept. */
const keptMarker = 'chaos-kept';
const portTriesMax = 5;

/** A cluster of this run's own: a name no other run has, and a free port. */
export async function freshClusterSpec(version = clusterVersionDefault): Promise<PrivateClusterSpec> {
  return { version, name: `chaos_p${process.pid}_${randomBytes(4).toString('hex')}`, port: await drawFreePort() };
}

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

async function dropCluster(cluster: Pick<PrivateClusterSpec, 'version' | 'name'>): Promise<void> {
  await run('pg_dropcluster', ['--stop', cluster.version, cluster.name], { timeout: 60_000 });
}

/** Drops the clusters of chaos runs that died without dropping theirs (not those kept for inspection). */
export async function sweepDeadRunsClusters(log: (message: string) => void): Promise<void> {
  const { stdout } = await run('pg_lsclusters', ['--no-header'], { timeout: 10_000 });
  for (const [version, name] of stdout.split('\n').map((text) => text.trim().split(/\s+/))) {
    const pid = clusterNamePattern.exec(name ?? '')?.[1];
    if (version === undefined || name === undefined || pid === undefined || pidAlive(Number(pid))) continue;
    if (existsSync(`/etc/postgresql/${version}/${name}/${keptMarker}`)) continue;
    log(`dropping cluster ${version}/${name}, left by a chaos run that is gone`);
    await dropCluster({ version, name }).catch((error: unknown) => log(`could not drop ${version}/${name}: ${whyCommandFailed(error)}`));
  }
}

/**
 * Makes and starts the cluster; another process may take its port between the draw and the
 * start: the start fails saying so, and is tried on another port. Answers its URL.
 */
export async function makePrivateCluster(cluster: PrivateClusterSpec, log: (message: string) => void): Promise<string> {
  await run('pg_createcluster', [cluster.version, cluster.name, '--port', String(cluster.port), '--', '--auth=trust'],
    { timeout: 120_000 });
  for (let tryNumber = 1; ; tryNumber++) {
    try {
      await ctl(cluster, 'start');
      return `postgres://postgres@127.0.0.1:${cluster.port}`;
    } catch (error) {
      const why = whyCommandFailed(error);
      if (!/already in use|could not bind|lock file/i.test(why) || tryNumber >= portTriesMax) {
        await dropCluster(cluster).catch(() => undefined);
        throw error;
      }
      const port = await drawFreePort();
      log(`cluster ${cluster.version}/${cluster.name} could not take port ${cluster.port} (${why}); trying port ${port}`);
      await run('pg_conftool', [cluster.version, cluster.name, 'set', 'port', String(port)], { timeout: 10_000 });
      cluster.port = port;
    }
  }
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
 * else on a private cluster made for this run (`cluster`, or a fresh name and port), else on
 * the shared server.
 */
export async function prepareDatabase(options: { name: string; serverUrl?: string; cluster?: PrivateClusterSpec;
  log: (message: string) => void }): Promise<ChaosDatabase> {
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(options.name)) throw new RangeError(`bad database name ${options.name}`);
  const onServer = async (serverUrl: string, note: string): Promise<ChaosDatabase> => {
    const url = await createDatabase(serverUrl, options.name);
    return { url, restart: null, note, drop: () => dropDatabase(serverUrl, options.name),
      keep: () => `database kept: ${url} (DROP DATABASE "${options.name}" when done)` };
  };
  if (options.serverUrl !== undefined) {
    return onServer(withDefaultUser(options.serverUrl), 'the restart fault is left out: --pg-url names a server this run does not own');
  }
  const cluster = options.cluster ?? await freshClusterSpec();
  let clusterUrl: string;
  try {
    await sweepDeadRunsClusters(options.log).catch(() => undefined); // no pg_lsclusters: the make below says why
    clusterUrl = await makePrivateCluster(cluster, options.log);
  } catch (error) {
    const reason = whyCommandFailed(error);
    options.log(`no private PostgreSQL cluster (${reason}); using the shared server without the restart fault`);
    return onServer(sharedServerUrl(), `the restart fault is left out: no private cluster (${reason})`);
  }
  const url = await createDatabase(clusterUrl, options.name).catch(async (error: unknown) => {
    await dropCluster(cluster).catch(() => undefined);
    throw error;
  });
  options.log(`private cluster ${cluster.version}/${cluster.name} on port ${cluster.port}`);
  return {
    url,
    restart: async () => {
      await ctl(cluster, 'restart', '-m', 'immediate');
    },
    note: null,
    drop: () => dropCluster(cluster),
    keep: () => {
      writeFileSync(`/etc/postgresql/${cluster.version}/${cluster.name}/${keptMarker}`, `${url}\n`);
      return `database kept: ${url} on cluster ${cluster.version}/${cluster.name} `
        + `(pg_dropcluster --stop ${cluster.version} ${cluster.name} when done)`;
    },
  };
}
