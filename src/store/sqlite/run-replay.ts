/**
 * Replay (API.md "Dead letters"): a dead run back to ready under the same run id, as
 * run-lifecycle.ts `decideReplay` says; any other status is answered `invalid_state`.
 */
import type Database from 'better-sqlite3';
import { decideReplay } from '../../domain/run-lifecycle.js';
import type { ReplayOutcome, TeamScope } from '../store.js';
import { runFromRow } from './rows.js';
import type { RunTable } from './tables.js';
import { atomically } from './atomically.js';

export class RunReplay {
  private readonly markReplayed: Database.Statement<[string, number, number, string]>;

  constructor(private readonly db: Database.Database, private readonly runs: RunTable) {
    this.markReplayed = db.prepare(`
      UPDATE runs SET status = ?, attempt_base = ?, ready_at = ?, finished_at = NULL, lease_expires_at = NULL, held = 0
      WHERE run_id = ?`);
  }

  replay(team: TeamScope, runId: string, nowMs: number): ReplayOutcome {
    const apply = (): ReplayOutcome => {
      const row = this.runs.get(runId);
      if (row === undefined || (team !== null && row.team !== team)) return { kind: 'not_found' };
      const decided = decideReplay(row, nowMs);
      if (decided.kind === 'invalid_state') return { kind: 'invalid_state', run: runFromRow(row) };
      this.markReplayed.run(decided.toStatus, decided.attemptBase, decided.readyAtMs, runId);
      this.runs.event(runId, nowMs, decided.eventType, row.status, decided.toStatus, decided.detail);
      return { kind: 'replayed', run: runFromRow(this.runs.get(runId)!) };
    };
    return atomically(this.db, apply);
  }
}
