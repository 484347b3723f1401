/**
 * Shard leases (DESIGN.md flow 3): one row per shard, a token from the `tickler_tokens`
 * sequence that only grows, and an expiry judged by PostgreSQL's clock when the store runs
 * in real time (so nodes with skewed clocks still agree on who owns what). A released lease
 * keeps its row and token with no holder: the token stays the highest granted, so a zombie's
 * write with an older token is still rejected at the sink (invariant 2).
 *
 * Every statement locks its rows in shard order, so acquires, renewals, releases and the
 * dispatch's FOR KEY SHARE (also in shard order) cannot deadlock each other. Only an acquire
 * changes `token`, a key (unique index), and so only an acquire waits for the dispatches in
 * flight on its shards; renewals and releases lock FOR NO KEY UPDATE and pass them by.
 */
import type { ShardLease } from '../store.js';
import { numberArray } from './array-literals.js';
import { leaseQuery, type StoreContext } from './context.js';

/** `$1` = use the database clock, `$2` = the caller's nowMs. */
const nowSql = `(CASE WHEN $1::bool THEN (extract(epoch FROM clock_timestamp()) * 1000)::bigint ELSE $2::bigint END)`;

interface LeaseRow {
  shard: number;
  node_id: string;
  token: string;
  expires_at: number;
}

function leaseFromRow(row: LeaseRow): ShardLease {
  return { shard: row.shard, nodeId: row.node_id, token: row.token, expiresAtMs: row.expires_at };
}

export async function acquireShardLeases(context: StoreContext, nodeId: string, shards: readonly number[], ttlMs: number,
  nowMs: number, force: boolean): Promise<ShardLease[]> {
  if (shards.length === 0) return [];
  // Every listed shard draws a token, used or not: gaps are harmless, order is what matters.
  // `EXCLUDED.token > l.token` keeps tokens growing when two acquirers race on one row.
  const result = await leaseQuery<LeaseRow>(context, 'acquireShardLeases',
    `INSERT INTO shard_leases AS l (shard, node_id, token, expires_at)
     SELECT s, $3, nextval('tickler_tokens'), ${nowSql} + $4
       FROM unnest($5::int[]) AS s ORDER BY s
     ON CONFLICT (shard) DO UPDATE
        SET node_id = EXCLUDED.node_id, token = EXCLUDED.token, expires_at = EXCLUDED.expires_at
      WHERE EXCLUDED.token > l.token
        AND ($6::bool OR l.node_id IS NULL OR l.node_id = $3 OR l.expires_at <= ${nowSql})
     RETURNING l.shard, l.node_id, l.token::text AS token, l.expires_at`,
    [context.useDatabaseClock, nowMs, nodeId, ttlMs, numberArray([...new Set(shards)]), force]);
  return result.rows.map(leaseFromRow).sort((a, b) => a.shard - b.shard);
}

export async function renewShardLeases(context: StoreContext, nodeId: string, leases: readonly ShardLease[], ttlMs: number,
  nowMs: number): Promise<ShardLease[]> {
  if (leases.length === 0) return [];
  const result = await leaseQuery<LeaseRow>(context, 'renewShardLeases',
    `WITH held AS (
       SELECT l.shard FROM shard_leases l JOIN unnest($5::int[], $6::bigint[]) AS h(shard, token)
           ON l.shard = h.shard AND l.token = h.token
        WHERE l.node_id = $3 ORDER BY l.shard FOR NO KEY UPDATE OF l
     )
     UPDATE shard_leases AS l SET expires_at = ${nowSql} + $4 FROM held WHERE l.shard = held.shard
     RETURNING l.shard, l.node_id, l.token::text AS token, l.expires_at`,
    [context.useDatabaseClock, nowMs, nodeId, ttlMs, leases.map((lease) => lease.shard),
      leases.map((lease) => lease.token)]);
  return result.rows.map(leaseFromRow).sort((a, b) => a.shard - b.shard);
}

export async function releaseShardLeases(context: StoreContext, nodeId: string, leases: readonly ShardLease[]): Promise<void> {
  if (leases.length === 0) return;
  await leaseQuery(context, 'releaseShardLeases',
    `WITH held AS (
       SELECT l.shard FROM shard_leases l JOIN unnest($2::int[], $3::bigint[]) AS h(shard, token)
           ON l.shard = h.shard AND l.token = h.token
        WHERE l.node_id = $1 ORDER BY l.shard FOR NO KEY UPDATE OF l
     )
     UPDATE shard_leases AS l SET node_id = NULL, expires_at = 0 FROM held WHERE l.shard = held.shard`,
    [nodeId, leases.map((lease) => lease.shard), leases.map((lease) => lease.token)]);
}

export async function listShardLeases(context: StoreContext): Promise<ShardLease[]> {
  const result = await leaseQuery<LeaseRow>(context, 'listShardLeases',
    `SELECT shard, node_id, token::text AS token, expires_at FROM shard_leases
      WHERE node_id IS NOT NULL ORDER BY shard`);
  return result.rows.map(leaseFromRow);
}
