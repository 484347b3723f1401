/**
 * What every query module of the PostgreSQL store needs: the pool, the commit hooks that
 * send notifications, and the store's configuration. Kept apart so the modules do not
 * depend on the store class.
 */
import type pg from 'pg';
import type { Logger } from '../../obs/log.js';
import { queryPool, withTransaction, type CommitHooks, type StatementText, type Transaction } from './connection.js';

export interface StoreContext {
  pool: pg.Pool;
  /**
   * Shard-lease statements only: a renewal queued behind a burst of dispatches and
   * completions on the shared pool would let the node's firing deadline pass while it still
   * holds its shards.
   */
  leasePool: pg.Pool;
  hooks: CommitHooks;
  /** Timers due before `now + nearHorizonMs` are announced through onNearTimers. */
  nearHorizonMs: number;
  /** Uniform [0, 1) draws for retry jitter; injectable so tests can pin it. */
  random: () => number;
  /** Shard-lease expiry judged by PostgreSQL's clock rather than the caller's `nowMs`. */
  useDatabaseClock: boolean;
  /**
   * Written on every lease this store grants (`active_runs.lease_node`): the id under which the
   * node heartbeats its cluster membership, whose lapse then cuts those leases; null records none.
   */
  leaseNodeId: string | null;
  logger: Logger;
}

export function transaction<T>(context: StoreContext, operation: string,
  body: (transaction: Transaction) => Promise<T>): Promise<T> {
  return withTransaction(context.pool, context.hooks, operation, body);
}

export function leaseQuery<Row extends pg.QueryResultRow>(context: StoreContext, operation: string,
  statement: StatementText, values?: unknown[]): Promise<pg.QueryResult<Row>> {
  return queryPool<Row>(context.leasePool, operation, statement, values);
}

export function query<Row extends pg.QueryResultRow>(context: StoreContext, operation: string,
  statement: StatementText, values?: unknown[]): Promise<pg.QueryResult<Row>> {
  return queryPool<Row>(context.pool, operation, statement, values);
}
