/**
 * Lease expiry (DESIGN.md flow 7): the running runs whose lease ended, in expiry order;
 * run-lifecycle.ts decides each one's fate (re-offered now, dead, or abandoned for an
 * at-most-once job), and this writes it with its event and releases the job's held run when
 * the run ended.
 */
import type Database from 'better-sqlite3';
import {
  decideExpiry, expiryEventType, expiryFinishedAtMs, expiryReadyAtMs, isFinalStatus, leaseExpiredError, leasedStatus,
} from '../../domain/run-lifecycle.js';
import type { JobSpec } from '../../domain/types.js';
import type { ExpiredLease } from '../store.js';
import type { RunRow } from './rows.js';
import { boundLimit, type RunTable } from './tables.js';
import { atomically } from './atomically.js';

type RunWithSpec = RunRow & { spec: string };

export class RunExpire {
  private readonly selectExpired: Database.Statement<[number, number], RunWithSpec>;
  private readonly setExpired: Database.Statement<{
    run_id: string; status: string; finished_at: number | null; ready_at: number | null;
  }>;

  constructor(private readonly db: Database.Database, private readonly runs: RunTable) {
    // `lease_expires_at <= now` is isLeaseExpired, down runs_running.
    this.selectExpired = db.prepare(`
      SELECT r.*, j.spec FROM runs r JOIN jobs j ON j.job_seq = r.job_seq
      WHERE r.status = '${leasedStatus}' AND r.lease_expires_at <= ? ORDER BY r.lease_expires_at ${boundLimit}`);
    this.setExpired = db.prepare(`
      UPDATE runs SET status = @status, finished_at = @finished_at, last_error = '${leaseExpiredError}', result = NULL,
        ready_at = @ready_at, lease_expires_at = NULL
      WHERE run_id = @run_id`);
  }

  expire(nowMs: number, limit: number): { expired: ExpiredLease[]; readyPools: string[] } {
    const readyPools: string[] = [];
    const apply = (): ExpiredLease[] => this.selectExpired.all(nowMs, limit).map((row) => {
      const spec = JSON.parse(row.spec) as JobSpec;
      const toStatus = decideExpiry(spec.idempotency, spec.retry, row.attempt - row.attempt_base);
      this.setExpired.run({ run_id: row.run_id, status: toStatus, finished_at: expiryFinishedAtMs(toStatus, nowMs),
        ready_at: expiryReadyAtMs(toStatus, nowMs) });
      this.runs.event(row.run_id, nowMs, expiryEventType(toStatus), leasedStatus, toStatus,
        { attempt: row.attempt, workerId: row.worker_id });
      if (isFinalStatus(toStatus)) {
        const pool = this.runs.releaseHeldRun(row.job_seq, nowMs)?.pool ?? null;
        if (pool !== null) readyPools.push(pool);
      } else {
        readyPools.push(row.pool);
      }
      return { runId: row.run_id, pool: row.pool, toStatus };
    });
    return { expired: atomically(this.db, apply), readyPools };
  }
}
