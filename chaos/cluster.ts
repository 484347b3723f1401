/**
 * The processes of a chaos run on 127.0.0.1: scheduler nodes, API nodes and chaos workers,
 * each a real `node` process (no shell, no npx, so a signal reaches the process itself), with
 * the short test timings of TESTING.md passed as `TICKLER_<FIELD>` variables. Also the two
 * outside looks the fault injector needs: which scheduler owns the busiest shards (read from
 * the shard lease table), and the nodes' counters (read from `/metrics`).
 *
 * Scheduler nodes run with `--roles scheduler`: they serve only `/healthz`, `/readyz` and
 * `/metrics`, which is all the harness reads from them.
 *
 * Each node gets a port of the run's own (ports.ts), keeps it across restarts, and is ready
 * when it says it listens — its own line in its own log, not an answer on its port, which
 * another process could give. Every node names the run on its answers (`TICKLER_TEST_RUN`),
 * and every client of the run checks that name (run-tag.ts).
 */
import { join } from 'node:path';
import pg from 'pg';
import { shardOf } from '../src/domain/identity.js';
import type { TimingConfig } from '../src/limits.js';
import { zombieArmSignal } from './fault-injector.js';
import type { HistoryRecorder } from './recorder.js';
import { drawFreePort } from './ports.js';
import { runFetch } from './run-tag.js';
import { StartFailure, type ManagedProcess, type Supervisor } from './supervisor.js';

export interface ClusterLayout {
  schedulers: string[];
  apis: string[];
  workers: string[];
  /** Base URL per node name (scheduler and API nodes). */
  urls: Map<string, string>;
  /** The run's tag, which every node names on its answers. */
  runTag: string;
}

export interface ClusterOptions {
  storeUrl: string;
  /** Names the run: its nodes answer with it, its clients check it. */
  runTag: string;
  artifactsDir: string;
  timing: TimingConfig;
  workerLeaseS: number;
  /** The workers' `--lease-ahead-ms`. */
  workerLeaseAheadMs: number;
  schedulerCount: number;
  apiCount: number;
  workerCount: number;
  /** The last this many workers speak straight to PostgreSQL (`openPostgresWorkerApi`) instead of to an API node. */
  directWorkerCount: number;
  repoDir: string;
}

const countersSampled = [
  'tickler_dispatch_rejected_stale_token_total',
  'tickler_dispatch_skipped_local_lease_expired_total',
  'tickler_worker_stale_token_total',
  'tickler_shard_ownership_changes_total',
  'tickler_reconciler_repairs_total',
];

function upperSnakeCase(field: string): string {
  return field.replace(/[A-Z]/g, (letter) => `_${letter}`).toUpperCase();
}

export function timingEnv(timing: TimingConfig): Record<string, string> {
  return Object.fromEntries(Object.entries(timing).map(([field, value]) => [`TICKLER_${upperSnakeCase(field)}`,
    String(value)]));
}

/** First starts of a node whose port another process took first, before it gives up. */
const portTriesMax = 5;

/**
 * Adds every process of the run to the supervisor (none is started yet), each node on a free
 * port of its own; `startNode` starts a node for the first time.
 */
export async function addClusterProcesses(supervisor: Supervisor, options: ClusterOptions): Promise<ClusterLayout> {
  const layout: ClusterLayout = { schedulers: [], apis: [], workers: [], urls: new Map(), runTag: options.runTag };
  const serverEnv = { ...timingEnv(options.timing), TICKLER_LOG_LEVEL: process.env['CHAOS_NODE_LOG_LEVEL'] ?? 'info',
    TICKLER_CHAOS_PAUSE_SIGNAL: zombieArmSignal, TICKLER_TEST_RUN: options.runTag };
  const node = async (name: string, roles: string): Promise<void> => {
    layout.urls.set(name, `http://127.0.0.1:${await drawFreePort(portsOf(layout))}`);
    supervisor.add({
      name, command: process.execPath, cwd: options.repoDir, env: serverEnv,
      args: () => ['--import', 'tsx', 'src/cli/main.ts', 'serve', '--store', options.storeUrl, '--roles', roles,
        '--node-id', name, '--host', '127.0.0.1', '--port', new URL(layout.urls.get(name) as string).port],
      logPath: join(options.artifactsDir, `${name}.log`), readyLogText: `(roles ${roles}, node ${name})`, readyTimeoutMs: 60_000,
    });
  };
  for (let index = 1; index <= options.schedulerCount; index++) {
    const name = `scheduler-${index}`;
    layout.schedulers.push(name);
    await node(name, 'scheduler');
  }
  for (let index = 1; index <= options.apiCount; index++) {
    const name = `api-${index}`;
    layout.apis.push(name);
    await node(name, 'api');
  }
  for (let index = 1; index <= options.workerCount; index++) {
    const name = `worker-${index}`;
    layout.workers.push(name);
    const apiName = layout.apis[(index - 1) % layout.apis.length] as string;
    const direct = index > options.workerCount - options.directWorkerCount;
    supervisor.add({
      name, command: process.execPath, cwd: options.repoDir, env: { TICKLER_LOG_LEVEL: 'warn' },
      // Its API node's URL as of the worker's start: a node's first start may have moved it.
      args: () => ['--import', 'tsx', 'chaos/worker.ts', '--name', name,
        ...(direct ? ['--store-url', options.storeUrl] : ['--base-url', layout.urls.get(apiName) as string]),
        '--run-tag', options.runTag,
        '--history', join(options.artifactsDir, `${name}.jsonl`), '--lease-s', String(options.workerLeaseS),
        '--lease-ahead-ms', String(options.workerLeaseAheadMs)],
      logPath: join(options.artifactsDir, `${name}.log`), readyLogText: `chaos worker ${name} started`,
    });
  }
  return layout;
}

function portsOf(layout: ClusterLayout): Set<number> {
  return new Set([...layout.urls.values()].map((url) => Number(new URL(url).port)));
}

/**
 * A node's first start. Another process may take its port between the draw and the node's
 * bind: the node exits saying so, and is started again on another port. (A restart keeps the
 * port, its clients holding the URL; there a taken port fails the restart, loudly.)
 */
export async function startNode(supervisor: Supervisor, layout: ClusterLayout, name: string,
  log: (message: string) => void): Promise<void> {
  for (let tryNumber = 1; ; tryNumber++) {
    try {
      await supervisor.get(name).start();
      return;
    } catch (error) {
      if (!(error instanceof StartFailure) || !portTaken(error) || tryNumber >= portTriesMax) throw error;
      const url = `http://127.0.0.1:${await drawFreePort(portsOf(layout))}`;
      log(`${name}: ${error.reason}; starting it on ${url} instead`);
      layout.urls.set(name, url);
    }
  }
}

export function portTaken(failure: StartFailure): boolean {
  return failure.exited && /cannot listen on .*EADDRINUSE/.test(failure.reason);
}

/**
 * The running scheduler owning most of the given shards now, by the lease table and the
 * database's clock; null when the table cannot be read (the database may be restarting).
 */
export async function busiestOwner(storeUrl: string, shards: readonly number[],
  running: readonly string[]): Promise<string | null> {
  const client = new pg.Client({ connectionString: storeUrl, connectionTimeoutMillis: 1_000, query_timeout: 1_000 });
  try {
    await client.connect();
    const answer = await client.query<{ node_id: string; owned: string }>(
      `SELECT node_id, count(*) AS owned FROM shard_leases
        WHERE shard = ANY($1::int[]) AND expires_at > (extract(epoch FROM clock_timestamp()) * 1000)::bigint
        GROUP BY node_id ORDER BY owned DESC`, [shards]);
    return answer.rows.map((row) => row.node_id).find((nodeId) => running.includes(nodeId)) ?? null;
  } catch {
    return null; // the caller falls back to a scheduler drawn from the seed
  } finally {
    await client.end().catch(() => undefined);
  }
}

export function shardsOf(jobIds: Iterable<string>): number[] {
  return [...new Set([...jobIds].map(shardOf))];
}

/** Samples the nodes' counters into the history; a node that does not answer in time is skipped. */
export async function sampleCounters(supervisor: Supervisor, layout: ClusterLayout,
  recorder: HistoryRecorder): Promise<number> {
  let missed = 0;
  const sample = runFetch(layout.runTag, recorder, 'sampler');
  await Promise.all([...layout.schedulers, ...layout.apis].map(async (name) => {
    const managed: ManagedProcess = supervisor.get(name);
    if (managed.state !== 'running') return;
    const incarnation = managed.incarnation;
    try {
      const response = await sample(`${layout.urls.get(name) as string}/metrics`, { signal: AbortSignal.timeout(800) });
      const text = await response.text();
      for (const [counter, value] of countersIn(text)) {
        recorder.record({ type: 'counter_sample', process: name, incarnation, name: counter, value });
      }
    } catch {
      missed += 1; // a node being killed or restarted; the next sample catches up
    }
  }));
  return missed;
}

/** Sums each sampled counter over its label sets. */
export function countersIn(metricsText: string): Map<string, number> {
  const totals = new Map<string, number>();
  for (const line of metricsText.split('\n')) {
    if (line.startsWith('#')) continue;
    const match = /^([a-z_]+)(\{[^}]*\})?\s+([0-9.eE+-]+)$/.exec(line.trim());
    if (match === null || !countersSampled.includes(match[1] as string)) continue;
    totals.set(match[1] as string, (totals.get(match[1] as string) ?? 0) + Number(match[3]));
  }
  return totals;
}
