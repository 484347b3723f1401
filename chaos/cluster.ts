/**
 * The processes of a chaos run on 127.0.0.1: scheduler nodes, API nodes and chaos workers,
 * each a real `node` process (no shell, no npx, so a signal reaches the process itself), with
 * the short test timings of TESTING.md passed as `TICKLER_<FIELD>` variables. Also the two
 * outside looks the fault injector needs: which scheduler owns the busiest shards (read from
 * the shard lease table), and the nodes' counters (read from `/metrics`).
 *
 * Scheduler nodes run with `--roles scheduler`: they serve only `/healthz`, `/readyz` and
 * `/metrics`, which is all the harness reads from them.
 */
import { join } from 'node:path';
import pg from 'pg';
import { shardOf } from '../src/domain/identity.js';
import type { TimingConfig } from '../src/limits.js';
import { zombieArmSignal } from './fault-injector.js';
import type { HistoryRecorder } from './recorder.js';
import type { ManagedProcess, Supervisor } from './supervisor.js';

export interface ClusterLayout {
  schedulers: string[];
  apis: string[];
  workers: string[];
  /** Base URL per node name (scheduler and API nodes). */
  urls: Map<string, string>;
}

export interface ClusterOptions {
  storeUrl: string;
  portBase: number;
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

/** Adds every process of the run to the supervisor (none is started yet). */
export function addClusterProcesses(supervisor: Supervisor, options: ClusterOptions): ClusterLayout {
  const layout: ClusterLayout = { schedulers: [], apis: [], workers: [], urls: new Map() };
  const serverEnv = { ...timingEnv(options.timing), TICKLER_LOG_LEVEL: process.env['CHAOS_NODE_LOG_LEVEL'] ?? 'info',
    TICKLER_CHAOS_PAUSE_SIGNAL: zombieArmSignal };
  const node = (name: string, roles: string, port: number): void => {
    const url = `http://127.0.0.1:${port}`;
    layout.urls.set(name, url);
    supervisor.add({
      name, command: process.execPath, cwd: options.repoDir, env: serverEnv,
      args: ['--import', 'tsx', 'src/cli/main.ts', 'serve', '--store', options.storeUrl, '--roles', roles,
        '--node-id', name, '--host', '127.0.0.1', '--port', String(port)],
      logPath: join(options.artifactsDir, `${name}.log`), readyUrl: `${url}/healthz`, readyTimeoutMs: 60_000,
    });
  };
  for (let index = 1; index <= options.schedulerCount; index++) {
    const name = `scheduler-${index}`;
    layout.schedulers.push(name);
    node(name, 'scheduler', options.portBase + 10 + index);
  }
  for (let index = 1; index <= options.apiCount; index++) {
    const name = `api-${index}`;
    layout.apis.push(name);
    node(name, 'api', options.portBase + index);
  }
  for (let index = 1; index <= options.workerCount; index++) {
    const name = `worker-${index}`;
    layout.workers.push(name);
    const apiUrl = layout.urls.get(layout.apis[(index - 1) % layout.apis.length] as string) as string;
    const direct = index > options.workerCount - options.directWorkerCount;
    supervisor.add({
      name, command: process.execPath, cwd: options.repoDir, env: { TICKLER_LOG_LEVEL: 'warn' },
      args: ['--import', 'tsx', 'chaos/worker.ts', '--name', name, ...(direct ? ['--store-url', options.storeUrl] : ['--base-url', apiUrl]),
        '--history', join(options.artifactsDir, `${name}.jsonl`), '--lease-s', String(options.workerLeaseS),
        '--lease-ahead-ms', String(options.workerLeaseAheadMs)],
      logPath: join(options.artifactsDir, `${name}.log`), readyLogText: `chaos worker ${name} started`,
    });
  }
  return layout;
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
  await Promise.all([...layout.schedulers, ...layout.apis].map(async (name) => {
    const managed: ManagedProcess = supervisor.get(name);
    if (managed.state !== 'running') return;
    const incarnation = managed.incarnation;
    try {
      const response = await fetch(`${layout.urls.get(name) as string}/metrics`, { signal: AbortSignal.timeout(800) });
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
