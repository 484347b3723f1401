// Many nodes on PostgreSQL (docs/operations.md, "How a cluster holds together"), as real `tickler serve` processes on a fresh
// database with short leases (TTL 2 s, renew every 500 ms, margin 500 ms): three scheduler
// nodes converge to fair shares; a node stopped with SIGTERM hands its shards over within a
// renew cycle or two; one killed with -9 has its shards owned again within TTL + 2 s; one
// SIGSTOPped past its TTL fires nothing when it wakes (its timer is dispatched once, by the new
// owner) and then rejoins; an API node whose database is unreachable answers 503 quickly.
// Wall-clock bounds here are the promise under test, measured from the event to the answer.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { shardOf } from '../../src/domain/identity.js';
import { withDefaultUser } from '../../src/store/postgres/connection.js';
import { TicklerClient } from '../../src/worker/client.js';
import { postgresSkipReason, startProxy, testPgUrl } from '../store/postgres-harness.js';
import { cliPath, eventually, repoRoot } from './server-process.js';

const skip = await postgresSkipReason();
const ttlMs = 2_000;
const renewMs = 500;
const timingEnv = {
  TICKLER_SHARD_LEASE_TTL_MS: String(ttlMs),
  TICKLER_SHARD_LEASE_RENEW_INTERVAL_MS: String(renewMs),
  TICKLER_SHARD_LEASE_SAFETY_MARGIN_MS: '500',
  TICKLER_LOAD_REFRESH_INTERVAL_MS: '5000',
};
/** Polling /readyz adds its own delay to a measured handover; this much is allowed for it. */
const pollSlackMs = 300;

interface Node {
  name: string;
  url: string;
  child: ChildProcess;
  exited: Promise<void>;
  output(): string;
}

/**
 * Starts a node on a port the kernel picks (`--port 0`) and takes its URL from its own
 * "listening" line: no port is chosen here that another process could take first, and no
 * answer on a port is mistaken for this node's.
 */
async function startNode(name: string, roles: string, storeUrl: string): Promise<Node> {
  const child = spawn(process.execPath, ['--import', 'tsx', cliPath, 'serve', '--store', storeUrl, '--roles', roles,
    '--node-id', name, '--port', '0'], {
    cwd: repoRoot, env: { ...process.env, TICKLER_LOG_LEVEL: 'warn', ...timingEnv }, stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => { output += chunk.toString(); });
  child.stderr!.on('data', (chunk: Buffer) => { output += chunk.toString(); });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let gone = false;
  void exited.then(() => { gone = true; });
  const url = await eventually(async () => {
    if (gone) throw new Error(`${name} exited before it listened:\n${output}`);
    return new RegExp(`tickler listening on (\\S+) \\(roles ${roles}, node ${name}\\)`).exec(output)?.[1];
  }, `${name} to listen`, 60_000);
  return { name, url, child, exited, output: () => output };
}

async function shardsOf(node: Node): Promise<number[]> {
  const response = await fetch(`${node.url}/readyz`, { signal: AbortSignal.timeout(2_000) });
  return ((await response.json()) as { shards: number[] }).shards;
}

/** Waits until the nodes hold disjoint shards whose counts (sorted) satisfy `wanted`; answers how long it took. */
async function untilOwned(nodes: readonly Node[], wanted: (counts: number[]) => boolean, what: string,
  timeoutMs = 30_000): Promise<number> {
  const startedMs = performance.now();
  await eventually(async () => {
    const all = await Promise.all(nodes.map(shardsOf));
    const union = new Set(all.flat());
    const counts = all.map((shards) => shards.length).sort((a, b) => a - b);
    return union.size === all.flat().length && wanted(counts) ? true : undefined;
  }, what, timeoutMs);
  return performance.now() - startedMs;
}

const fairThree = (counts: number[]): boolean => counts.join('/') === '340/342/342';
const allTwo = (counts: number[]): boolean => counts[0]! + counts[1]! === 1024 && counts[0]! > 0;

async function withDatabase(name: string, sql: string): Promise<void> {
  const admin = new pg.Client({ connectionString: withDefaultUser(testPgUrl) });
  await admin.connect();
  try {
    await admin.query(sql.replace('$DB', `"${name}"`));
  } finally {
    await admin.end();
  }
}

void describe('a PostgreSQL cluster of real processes', { skip: skip ?? false, timeout: 600_000 }, () => {
  const database = `tickler_cluster_${randomBytes(5).toString('hex')}`;
  const storeUrl = (() => {
    const url = new URL(withDefaultUser(testPgUrl));
    url.pathname = `/${database}`;
    return url.toString();
  })();
  const nodes = new Map<string, Node>();
  const start = async (name: string, roles = 'scheduler', url = storeUrl): Promise<Node> => {
    const node = await startNode(name, roles, url);
    nodes.set(name, node);
    return node;
  };
  const stopAll = async (): Promise<void> => {
    await Promise.all([...nodes.values()].map(async (node) => {
      node.child.kill('SIGCONT');
      node.child.kill('SIGTERM');
      await node.exited;
    }));
    nodes.clear();
  };

  before(async () => {
    await withDatabase(database, 'CREATE DATABASE $DB');
    // The first node migrates alone, so the three below race only for shards.
    await start('api-1', 'api');
  });
  after(async () => {
    await stopAll();
    await withDatabase(database, 'DROP DATABASE IF EXISTS $DB WITH (FORCE)');
  });

  void it('three scheduler nodes converge to fair shares, 342/342/340', async () => {
    await Promise.all(['s1', 's2', 's3'].map((name) => start(name)));
    await untilOwned(['s1', 's2', 's3'].map((name) => nodes.get(name)!), fairThree, 'shares of 342/342/340');
  });

  void it('SIGTERM of one: the two others own all 1,024 within two renew cycles', async (t) => {
    const leaving = nodes.get('s3')!;
    leaving.child.kill('SIGTERM');
    await leaving.exited;
    nodes.delete('s3');
    const tookMs = await untilOwned([nodes.get('s1')!, nodes.get('s2')!], allTwo, 'all shards owned by s1 and s2');
    t.diagnostic(`SIGTERM handover: ${Math.round(tookMs)} ms`);
    assert.ok(tookMs <= 2 * renewMs + pollSlackMs, `handed over in ${Math.round(tookMs)} ms`);
    await untilOwned([nodes.get('s1')!, nodes.get('s2')!], (counts) => counts.join('/') === '512/512', 'shares of 512/512');
  });

  void it('kill -9 of one: its shards are owned again within lease TTL + 2 s', async (t) => {
    await start('s3');
    const three = ['s1', 's2', 's3'].map((name) => nodes.get(name)!);
    await untilOwned(three, fairThree, 'shares of 342/342/340 again');
    const victim = nodes.get('s3')!;
    victim.child.kill('SIGKILL');
    await victim.exited;
    nodes.delete('s3');
    const tookMs = await untilOwned([nodes.get('s1')!, nodes.get('s2')!], allTwo, 'all shards owned by s1 and s2');
    t.diagnostic(`kill -9 takeover: ${Math.round(tookMs)} ms`);
    assert.ok(tookMs <= ttlMs + 2_000, `owned again ${Math.round(tookMs)} ms after the kill`);
  });

  void it('a node SIGSTOPped past its TTL fires nothing when it wakes; its timer fires once, elsewhere; it rejoins', async () => {
    const zombie = await start('s3');
    const three = ['s1', 's2', 's3'].map((name) => nodes.get(name)!);
    await untilOwned(three, fairThree, 'shares of 342/342/340 again');
    const client = new TicklerClient({ baseUrl: nodes.get('api-1')!.url });
    const zombieShards = new Set(await shardsOf(zombie));
    const dueMs = Date.now() + 1_500;
    // A job lands on a shard by its id: create until one lands on the zombie's.
    let jobId: string | undefined;
    for (let tries = 0; tries < 40 && jobId === undefined; tries++) {
      const job = await client.createJob({ schedule: { at: new Date(dueMs).toISOString() }, pool: 'cluster' });
      if (zombieShards.has(shardOf(job.job_id))) jobId = job.job_id;
      else await client.cancelJob(job.job_id);
    }
    assert.ok(jobId !== undefined, 'a job on one of the zombie\'s shards');
    zombie.child.kill('SIGSTOP');
    const stoppedForMs = 3 * ttlMs;
    await new Promise((resolve) => setTimeout(resolve, stoppedForMs));
    const run = (await client.listJobRuns(jobId)).items[0];
    assert.ok(run !== undefined, 'the new owner dispatched the timer due while the zombie was stopped');
    zombie.child.kill('SIGCONT');
    await untilOwned(three, fairThree, 'the zombie rejoining: 342/342/340');
    const detail = await client.getRun(run.run_id);
    const dispatched = (detail.events ?? []).filter((event) => event.type === 'dispatched');
    assert.equal(dispatched.length, 1, 'dispatched exactly once');
    const dispatchesOf = async (node: Node): Promise<number> => {
      const response = await fetch(`${node.url}/metrics`);
      assert.equal(response.status, 200);
      const text = await response.text();
      assert.match(text, /^# TYPE tickler_dispatches_total counter$/m);
      return [...text.matchAll(/^tickler_dispatches_total\{[^}]*\} (\d+)$/gm)].reduce((sum, match) => sum + Number(match[1]), 0);
    };
    assert.equal(await dispatchesOf(zombie), 0, 'the zombie dispatched nothing');
    assert.equal((await dispatchesOf(nodes.get('s1')!)) + (await dispatchesOf(nodes.get('s2')!)), 1, 'the new owner did, once');
  });

  void it('kill -9 of an API node that granted leases: those not heartbeated are cut to lease_s / 3 + 5 s once it is seen gone', async (t) => {
    // An api-only node is a member that takes no shards (the shares above count schedulers only).
    const granter = await start('api-2', 'api');
    const api = new TicklerClient({ baseUrl: nodes.get('api-1')!.url });
    const now = new Date().toISOString();
    for (let index = 0; index < 2; index++) await api.createJob({ schedule: { at: now }, pool: 'orphans', lease_s: 30 });
    const viaGranter = new TicklerClient({ baseUrl: granter.url });
    const leased: Awaited<ReturnType<typeof viaGranter.leaseRuns>>['runs'] = [];
    await eventually(async () => {
      leased.push(...(await viaGranter.leaseRuns({ pool: 'orphans', max: 2 - leased.length, wait_s: 1 })).runs);
      return leased.length === 2 ? true : undefined;
    }, 'both runs leased through api-2', 20_000);
    const [lost, kept] = leased as [typeof leased[0], typeof leased[0]];
    // A heartbeat (through another node) proves its worker has the run: the cut leaves it alone.
    const beat = await api.heartbeat(kept.run_id, kept.fencing_token);
    granter.child.kill('SIGKILL');
    await granter.exited;
    nodes.delete('api-2');
    const killedMs = Date.now();
    const startedMs = performance.now();
    const cutTo = await eventually(async () => {
      const expiresAt = (await api.getRun(lost.run_id)).lease_expires_at;
      return typeof expiresAt === 'string' && Date.parse(expiresAt) !== Date.parse(lost.lease_expires_at) ? Date.parse(expiresAt) : undefined;
    }, 'the lost answer\'s lease cut', 20_000);
    const tookMs = performance.now() - startedMs;
    t.diagnostic(`lease cut ${Math.round(tookMs)} ms after the kill; it now ends ${Math.round(cutTo - killedMs)} ms after it`);
    assert.ok(tookMs <= ttlMs + 2 * renewMs + pollSlackMs, `cut ${Math.round(tookMs)} ms after the kill`);
    assert.ok(cutTo <= Date.now() + 10_000 + 5_000 && cutTo >= killedMs + 10_000 + 5_000,
      `cut to a third of 30 s plus 5 s from when api-2 was seen gone (${cutTo - killedMs} ms after the kill)`);
    assert.ok(cutTo < Date.parse(lost.lease_expires_at) - 10_000);
    assert.equal((await api.getRun(kept.run_id)).lease_expires_at, beat.lease_expires_at, 'the heartbeated lease is untouched');
    assert.equal((await api.getRun(lost.run_id)).status, 'running');
  });

  void it('an API node whose database is unreachable answers 503 unavailable quickly', async (t) => {
    const target = new URL(withDefaultUser(testPgUrl));
    const proxy = await startProxy(target);
    const viaProxy = new URL(storeUrl);
    viaProxy.port = String(proxy.port);
    const api = await start('api-proxied', 'api', viaProxy.toString());
    try {
      await new TicklerClient({ baseUrl: api.url }).listJobs({ limit: 1 });
      await proxy.stop();
      const startedMs = performance.now();
      const response = await fetch(`${api.url}/v1/jobs?limit=1`);
      const tookMs = performance.now() - startedMs;
      t.diagnostic(`503 during the outage in ${Math.round(tookMs)} ms`);
      assert.equal(response.status, 503);
      assert.equal(((await response.json()) as { error: { code: string } }).error.code, 'unavailable');
      assert.ok(tookMs < 5_000, `answered in ${Math.round(tookMs)} ms`);
    } finally {
      await proxy.stop();
    }
  });
});
