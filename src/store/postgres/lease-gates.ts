/**
 * Capacity on PostgreSQL (store.ts `CapacityStore`), holding across nodes: every lease
 * statement leaves out runs of a paused (pool, team) and runs tagged with a capped resource
 * (`leaseGateConditions`, judged by the statement itself against the tables as committed).
 * Runs under a cap are leased by `leaseUnderCaps` alone: in one transaction it locks the
 * caps' rows (every node's lease of those resources queues there), counts the slots held,
 * leases the runs that fit and writes their slots. A slot counts while its run is `running`
 * under the token that took it, so completion, failure, lease expiry and cancel free it in
 * their own transaction without touching the slot; stale rows are swept under the cap's lock.
 */
import { refillBucket, runPlan, type LeaseSlice } from '../../domain/lease-policy.js';
import type { Lane } from '../../domain/types.js';
import {
  allTeamsPause, readyMaxOf, type LeasedRun, type LeaseRunsRequest, type PoolPause, type ResourceUsage, type TeamScope,
} from '../store.js';
import type { PreparedStatement } from './connection.js';
import { textArray } from './array-literals.js';
import { query, transaction, type StoreContext } from './context.js';

/** The claim's source in a lease statement (worker-runs.ts `leaseStatementText`). */
export type LeasePick = 'queue' | 'lane' | 'lane-team' | 'named';

/**
 * The conditions every lease statement adds to its claim. A pause of the whole pool is an
 * uncorrelated subquery, judged once per statement (a paused pool's lease reads no queue row);
 * a team's pause and a capped resource are probed per candidate, the resource only while some
 * cap exists (an uncorrelated probe of the caps' key, judged once): as a correlated
 * scalar subquery (the job by its key, then each of its resources' caps by its key), which a NOT EXISTS
 * was planned as a hashed subplan reading every tagged job. `named` (runs the gate admitted)
 * keeps the capped ones.
 */
export function leaseGateConditions(named: boolean): string {
  const paused = `AND NOT EXISTS (SELECT 1 FROM pool_pauses pa WHERE pa.pool = $1 AND pa.team = '${allTeamsPause}')
        AND NOT EXISTS (SELECT 1 FROM pool_pauses pt WHERE pt.pool = $1 AND pt.team = q.team)`;
  if (named) return paused;
  return `${paused}
        AND ((SELECT true FROM resource_caps c0 ORDER BY c0.name LIMIT 1) IS NULL
             OR (SELECT true FROM unnest((SELECT g.resources FROM jobs g WHERE g.job_id = q.job_id)) AS t(name)
                  WHERE (SELECT true FROM resource_caps c WHERE c.name = t.name) LIMIT 1) IS NULL)`;
}

/** What the gates need of the lease statements (worker-runs.ts), passed in to keep the modules acyclic. */
export interface LeaseKit {
  statements: Record<'lane' | 'lane-team' | 'named', PreparedStatement>;
  parameters(request: LeaseRunsRequest, leaseNodeId: string | null, max: number, aheadMs: number, afterMs: number): unknown[];
  runOf(row: never): LeasedRun;
  noLowerBound: number;
}

/** How long a node trusts its read of which resources are capped; a lease statement judges caps itself meanwhile. */
const capsReadTtlMs = 1_000;
const capsRead = new WeakMap<StoreContext, { atMs: number; names: string[] }>();

async function cappedNames(context: StoreContext, nowMs: number): Promise<string[]> {
  const known = capsRead.get(context);
  if (known !== undefined && nowMs >= known.atMs && nowMs - known.atMs < capsReadTtlMs) return known.names;
  const rows = (await query<{ name: string }>(context, 'resourceCaps', 'SELECT name FROM resource_caps ORDER BY name')).rows;
  const names = rows.map((row) => row.name);
  capsRead.set(context, { atMs: nowMs, names });
  return names;
}

export async function resourceCapsDeclared(context: StoreContext, nowMs: number): Promise<boolean> {
  return (await cappedNames(context, nowMs)).length > 0;
}

/** After a cap is written here, this node's next lease reads the caps again. */
function forgetCaps(context: StoreContext): void {
  capsRead.delete(context);
}

/**
 * A lease through the gates: runs under resource caps first (they are few and wait for a
 * slot), then the plan's slices or the plain lease (`plain`) for the rest.
 */
export async function leaseThroughGates(context: StoreContext, request: LeaseRunsRequest, kit: LeaseKit,
  plain: (request: LeaseRunsRequest) => Promise<LeasedRun[]>): Promise<LeasedRun[]> {
  if (request.max <= 0) return [];
  const leased: LeasedRun[] = [];
  const capped = await cappedNames(context, request.nowMs);
  if (capped.length > 0) leased.push(...await leaseUnderCaps(context, request, kit, capped));
  const rest = { ...request, max: request.max - leased.length, readyMax: readyMaxOf(request) - leased.length };
  if (rest.max <= 0) return leased;
  if (request.plan === undefined || rest.readyMax < rest.max) return [...leased, ...await plain(rest)];
  await runPlan(request.plan, rest.max, async (slice, room) => {
    const runs = await leaseSlice(context, rest, kit, slice, room, plain);
    leased.push(...runs);
    return runs.length;
  });
  return leased;
}

async function leaseSlice(context: StoreContext, request: LeaseRunsRequest, kit: LeaseKit, slice: LeaseSlice, room: number,
  plain: (request: LeaseRunsRequest) => Promise<LeasedRun[]>): Promise<LeasedRun[]> {
  const aheadMs = request.aheadMs ?? 0;
  if (slice.lane === null) return plain({ ...request, max: room, readyMax: room, team: slice.team ?? request.team });
  const team = slice.team ?? request.team;
  const statement = team !== null && request.team === null ? kit.statements['lane-team'] : kit.statements.lane;
  const parameters = kit.parameters({ ...request, team }, context.leaseNodeId, room, aheadMs, kit.noLowerBound);
  const rows = (await query(context, 'leaseRuns', statement, [...parameters, slice.lane])).rows as never[];
  return rows.map((row) => kit.runOf(row));
}

/** How many runs under caps a lease reads to find those that fit. */
const cappedCandidatesMax = 500;

/** Leases runs tagged with capped resources, each only while every one of its capped resources has a free slot. */
async function leaseUnderCaps(context: StoreContext, request: LeaseRunsRequest, kit: LeaseKit, capped: string[]):
  Promise<LeasedRun[]> {
  const wanted = readyMaxOf(request);
  if (wanted <= 0) return [];
  return transaction(context, 'leaseUnderCaps', async (tx) => {
    const candidates = (await tx.query<{ run_id: string; job_id: string; resources: string[] }>(
      `SELECT q.run_id, q.job_id, g.resources FROM jobs g JOIN active_runs q ON q.job_id = g.job_id
        WHERE g.resources IS NOT NULL AND g.resources && $2::text[]
          AND q.pool = $1 AND q.status IN ('ready', 'retry_wait') AND NOT q.held AND q.due_at <= $3::bigint
          AND ($4::text IS NULL OR q.team = $4)
          AND NOT EXISTS (SELECT 1 FROM pool_pauses pp WHERE pp.pool = q.pool AND pp.team IN ('${allTeamsPause}', q.team))
        ORDER BY q.lane, q.due_at LIMIT $5`,
      [request.pool, textArray(capped), request.nowMs, request.team, cappedCandidatesMax])).rows;
    if (candidates.length === 0) return [];
    const names = [...new Set(candidates.flatMap((row) => row.resources))].sort();
    // Every node's lease of these resources waits here, in name order (no deadlock between two).
    const caps = new Map((await tx.query<{ name: string; max_concurrency: number }>(
      'SELECT name, max_concurrency FROM resource_caps WHERE name = ANY($1::text[]) ORDER BY name FOR UPDATE',
      [textArray(names)])).rows.map((row) => [row.name, row.max_concurrency]));
    await tx.query(`DELETE FROM resource_slots s WHERE s.name = ANY($1::text[]) AND NOT EXISTS (
      SELECT 1 FROM runs r WHERE r.run_id = s.run_id AND r.status = 'running' AND r.fencing_token = s.token)`,
    [textArray([...caps.keys()])]);
    const inUse = new Map((await tx.query<{ name: string; count: string }>(
      'SELECT name, count(*) AS count FROM resource_slots WHERE name = ANY($1::text[]) GROUP BY name',
      [textArray([...caps.keys()])])).rows.map((row) => [row.name, Number(row.count)]));
    const chosen = candidates.filter((row) => {
      const held = row.resources.filter((name) => caps.has(name));
      if (!held.every((name) => (inUse.get(name) ?? 0) < caps.get(name)!)) return false;
      for (const name of held) inUse.set(name, (inUse.get(name) ?? 0) + 1);
      return true;
    }).slice(0, wanted);
    if (chosen.length === 0) return [];
    const parameters = kit.parameters(request, context.leaseNodeId, chosen.length, 0, kit.noLowerBound);
    const rows = (await tx.query(kit.statements.named, [...parameters,
      textArray(chosen.map((row) => row.job_id)), textArray(chosen.map((row) => row.run_id))])).rows as never[];
    const runs = rows.map((row) => kit.runOf(row));
    const resourcesOf = new Map(chosen.map((row) => [row.run_id, row.resources.filter((name) => caps.has(name))]));
    const slots = runs.flatMap((run) => resourcesOf.get(run.runId)!.map((name) => [name, run.runId, run.fencingToken]));
    await tx.query(`INSERT INTO resource_slots (name, run_id, token)
      SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])
      ON CONFLICT (name, run_id) DO UPDATE SET token = excluded.token`,
    [textArray(slots.map((slot) => slot[0]!)), textArray(slots.map((slot) => slot[1]!)), textArray(slots.map((slot) => slot[2]!))]);
    return runs;
  });
}

/** Teams with runs due by `nowMs` in each lane, one index seek per team (a skip scan of active_runs_leasable_by_team). */
export async function readyLaneTeams(context: StoreContext, team: TeamScope, pool: string, nowMs: number):
  Promise<Map<Lane, string[]>> {
  const rows = (await query<{ lane: Lane; team: string }>(context, 'readyLaneTeams',
    `SELECT l.lane, t.team FROM unnest(ARRAY['P0', 'P1', 'P2']) AS l(lane),
       LATERAL (
         WITH RECURSIVE t(team) AS (
           SELECT (SELECT min(q.team) FROM active_runs q WHERE q.pool = $1 AND q.lane = l.lane
                     AND q.status IN ('ready', 'retry_wait') AND NOT q.held AND ($2::text IS NULL OR q.team = $2))
           UNION ALL
           SELECT (SELECT min(q.team) FROM active_runs q WHERE q.pool = $1 AND q.lane = l.lane
                     AND q.status IN ('ready', 'retry_wait') AND NOT q.held AND q.team > t.team
                     AND ($2::text IS NULL OR q.team = $2))
             FROM t WHERE t.team IS NOT NULL)
         SELECT team FROM t WHERE team IS NOT NULL) AS t
      WHERE (SELECT min(q.due_at) FROM active_runs q WHERE q.pool = $1 AND q.lane = l.lane AND q.team = t.team
               AND q.status IN ('ready', 'retry_wait') AND NOT q.held) <= $3::bigint
      ORDER BY l.lane, t.team`, [pool, team, nowMs])).rows;
  const backlog = new Map<Lane, string[]>();
  for (const row of rows) backlog.set(row.lane, [...(backlog.get(row.lane) ?? []), row.team]);
  return backlog;
}

export async function putResourceCap(context: StoreContext, name: string, maxConcurrency: number, nowMs: number): Promise<void> {
  await query(context, 'putResourceCap', `INSERT INTO resource_caps (name, max_concurrency, updated_at) VALUES ($1, $2, $3)
    ON CONFLICT (name) DO UPDATE SET max_concurrency = excluded.max_concurrency, updated_at = excluded.updated_at`,
  [name, maxConcurrency, nowMs]);
  forgetCaps(context);
}

export async function deleteResourceCap(context: StoreContext, name: string): Promise<boolean> {
  const deleted = await query(context, 'deleteResourceCap', 'DELETE FROM resource_caps WHERE name = $1', [name]);
  forgetCaps(context);
  return (deleted.rowCount ?? 0) > 0;
}

export async function resourceUsage(context: StoreContext, names?: readonly string[]): Promise<ResourceUsage[]> {
  const rows = (await query<{ name: string; max_concurrency: number | null; in_use: string }>(context, 'resourceUsage',
    `SELECT n.name, c.max_concurrency,
            (SELECT count(*) FROM resource_slots s JOIN runs r ON r.run_id = s.run_id AND r.status = 'running'
               AND r.fencing_token = s.token WHERE s.name = n.name) AS in_use
       FROM (SELECT name FROM resource_caps WHERE $1::text[] IS NULL
             UNION SELECT unnest($1::text[])) AS n(name)
       LEFT JOIN resource_caps c ON c.name = n.name ORDER BY n.name`,
    [names === undefined ? null : textArray([...names])])).rows;
  return rows.map((row) => ({ name: row.name, maxConcurrency: row.max_concurrency, inUse: Number(row.in_use) }));
}

export async function setPoolPause(context: StoreContext, pool: string, team: string, paused: boolean, nowMs: number): Promise<void> {
  await transaction(context, 'setPoolPause', async (tx) => {
    if (paused) {
      await tx.query('INSERT INTO pool_pauses (pool, team, at_ms) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING', [pool, team, nowMs]);
    } else {
      await tx.query('DELETE FROM pool_pauses WHERE pool = $1 AND team = $2', [pool, team]);
      tx.readyPools.add(pool);
    }
  });
}

export async function clearPoolPauses(context: StoreContext, pool: string): Promise<void> {
  await transaction(context, 'clearPoolPauses', async (tx) => {
    await tx.query('DELETE FROM pool_pauses WHERE pool = $1', [pool]);
    tx.readyPools.add(pool);
  });
}

export async function listPoolPauses(context: StoreContext, pool: string | null): Promise<PoolPause[]> {
  const rows = (await query<{ pool: string; team: string; at_ms: number }>(context, 'listPoolPauses',
    'SELECT pool, team, at_ms FROM pool_pauses WHERE $1::text IS NULL OR pool = $1 ORDER BY pool, team', [pool])).rows;
  return rows.map((row) => ({ pool: row.pool, team: row.team, atMs: Number(row.at_ms) }));
}

export async function setLaneDispatchCap(context: StoreContext, lane: Lane, dispatchPerS: number | null): Promise<void> {
  if (dispatchPerS === null) await query(context, 'setLaneDispatchCap', 'DELETE FROM lane_caps WHERE lane = $1', [lane]);
  else {
    await query(context, 'setLaneDispatchCap', `INSERT INTO lane_caps (lane, dispatch_per_s) VALUES ($1, $2)
      ON CONFLICT (lane) DO UPDATE SET dispatch_per_s = excluded.dispatch_per_s`, [lane, dispatchPerS]);
  }
}

export async function listLaneDispatchCaps(context: StoreContext): Promise<Map<Lane, number>> {
  const rows = (await query<{ lane: Lane; dispatch_per_s: number }>(context, 'listLaneDispatchCaps',
    'SELECT lane, dispatch_per_s FROM lane_caps')).rows;
  return new Map(rows.map((row) => [row.lane, Number(row.dispatch_per_s)]));
}

/** The bucket's row locked, refilled and charged in one transaction: every node draws from the same tokens. */
export function takeDispatchTokens(context: StoreContext, key: string, ratePerS: number, wanted: number, nowMs: number):
  Promise<number> {
  return transaction(context, 'takeDispatchTokens', async (tx) => {
    await tx.query('INSERT INTO dispatch_buckets (key, tokens, at_ms) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING',
      [key, Math.max(1, ratePerS), nowMs]);
    const row = (await tx.query<{ tokens: number; at_ms: string }>(
      'SELECT tokens, at_ms FROM dispatch_buckets WHERE key = $1 FOR UPDATE', [key])).rows[0]!;
    const at = Number(row.at_ms);
    const { tokens, granted } = refillBucket({ tokens: Number(row.tokens), at }, ratePerS, wanted, nowMs);
    await tx.query('UPDATE dispatch_buckets SET tokens = $2, at_ms = $3 WHERE key = $1', [key, tokens - granted, Math.max(at, nowMs)]);
    return granted;
  });
}

export async function returnDispatchTokens(context: StoreContext, key: string, ratePerS: number, count: number): Promise<void> {
  await query(context, 'returnDispatchTokens',
    'UPDATE dispatch_buckets SET tokens = LEAST($2::float8, tokens + $3) WHERE key = $1', [key, Math.max(1, ratePerS), count]);
}
