/**
 * A run's life after dispatch (DESIGN.md flows 6–7), as the SQLite store carries it out: one
 * class per transition, each holding its prepared statements (run-lease.ts, run-heartbeat.ts,
 * run-complete.ts, run-expire.ts, run-replay.ts), and the reconciler's release of stranded
 * held runs. What each transition does is decided in domain/run-lifecycle.ts, whose top has
 * the state diagram. The worker's fencing token is checked in the same statement or
 * transaction that writes (invariant 4); every status change appends a run event
 * (invariant 6), except heartbeats, which change no status and would flood the log.
 */
import type Database from 'better-sqlite3';
import type { CompleteOutcome, CompleteRequest, ExpiredLease, HeartbeatOutcome, LeaseRunsRequest, LeasedRun, ReplayOutcome,
  TeamScope } from '../store.js';
import type { RunTable, TokenSequence } from './tables.js';
import { RunComplete } from './run-complete.js';
import { RunExpire } from './run-expire.js';
import { RunHeartbeat } from './run-heartbeat.js';
import { RunLease } from './run-lease.js';
import type { SqliteLeaseGates } from './lease-gates.js';
import { RunReplay } from './run-replay.js';

export class RunTransitions {
  private readonly leases: RunLease;
  private readonly heartbeats: RunHeartbeat;
  private readonly completions: RunComplete;
  private readonly expiries: RunExpire;
  private readonly replays: RunReplay;

  constructor(
    db: Database.Database,
    private readonly runs: RunTable,
    tokens: TokenSequence,
    random: () => number,
  ) {
    this.leases = new RunLease(db, runs, tokens);
    this.heartbeats = new RunHeartbeat(db, runs);
    this.completions = new RunComplete(db, runs, random);
    this.expiries = new RunExpire(db, runs);
    this.replays = new RunReplay(db, runs);
  }

  lease(request: LeaseRunsRequest): LeasedRun[] {
    return this.leases.lease(request);
  }

  /** Capacity (lease-gates.ts): pauses, resource caps, dispatch caps. */
  get gates(): SqliteLeaseGates {
    return this.leases.gates;
  }

  heartbeat(team: TeamScope, runId: string, fencingToken: string, nowMs: number): HeartbeatOutcome {
    return this.heartbeats.heartbeat(team, runId, fencingToken, nowMs);
  }

  complete(request: CompleteRequest): { outcome: CompleteOutcome; readyPools: string[] } {
    return this.completions.complete(request);
  }

  completeManySucceeded(requests: readonly CompleteRequest[]): { outcomes: (CompleteOutcome | null)[]; readyPools: string[] } {
    return this.completions.completeManySucceeded(requests);
  }

  expire(nowMs: number, limit: number): { expired: ExpiredLease[]; readyPools: string[] } {
    return this.expiries.expire(nowMs, limit);
  }

  replay(team: TeamScope, runId: string, nowMs: number): ReplayOutcome {
    return this.replays.replay(team, runId, nowMs);
  }

  /**
   * `Store.releaseStrandedHeldRuns`: held runs of jobs with no other active run, released as
   * a completion releases them. (One writer: nothing strands a held run here that the
   * completions do not release; the net is the same on both stores.)
   */
  releaseStranded(nowMs: number, limit: number): { released: { runId: string; jobId: string }[]; readyPools: string[] } {
    const released: { runId: string; jobId: string }[] = [];
    const readyPools: string[] = [];
    for (const jobSeq of this.runs.jobsHoldingRuns(limit)) {
      const run = this.runs.releaseHeldRun(jobSeq, nowMs);
      if (run === null) continue;
      released.push({ runId: run.runId, jobId: run.jobId });
      readyPools.push(run.pool);
    }
    return { released, readyPools };
  }
}
