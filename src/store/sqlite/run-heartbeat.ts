/**
 * The heartbeat (DESIGN.md flow 6): the fence and the write in one statement (invariant 4),
 * the lease's new end as run-lifecycle.ts sets it. No run event: a heartbeat changes no
 * status, and there would be one every lease_s / 3 per running attempt.
 */
import type Database from 'better-sqlite3';
import { heartbeatLeaseEndSql, leaseMissOf, leasedStatus } from '../../domain/run-lifecycle.js';
import type { HeartbeatOutcome, TeamScope } from '../store.js';
import { parseDecimalId } from './rows.js';
import type { RunTable } from './tables.js';

export class RunHeartbeat {
  private readonly extendLease: Database.Statement<[number, string, number], { lease_expires_at: number }>;

  constructor(db: Database.Database, private readonly runs: RunTable) {
    this.extendLease = db.prepare(`
      UPDATE runs SET lease_expires_at = ${heartbeatLeaseEndSql('?', 'lease_ms')}
      WHERE run_id = ? AND status = '${leasedStatus}' AND fencing_token = ? RETURNING lease_expires_at`);
  }

  /** A lease past its expiry that no sweep has taken yet still extends (`heartbeatLeaseEndMs`). */
  heartbeat(team: TeamScope, runId: string, fencingToken: string, nowMs: number): HeartbeatOutcome {
    const row = this.runs.get(runId);
    if (row === undefined || (team !== null && row.team !== team)) return leaseMissOf(undefined);
    const token = parseDecimalId(fencingToken);
    if (token !== null) {
      const extended = this.extendLease.get(nowMs, runId, token);
      if (extended !== undefined) return { kind: 'extended', leaseExpiresAtMs: extended.lease_expires_at };
    }
    return leaseMissOf(row);
  }
}
