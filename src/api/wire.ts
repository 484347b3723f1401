/**
 * Records to wire shapes (API.md): snake_case, times as RFC 3339 UTC with milliseconds,
 * null where there is none. The job answer is the spec with defaults filled in plus what
 * tickler knows about it.
 */
import type { JobRecord, RunEvent, RunRecord } from '../domain/types.js';
import type { LeasedRun, RunWithEvents } from '../store/store.js';

export function isoOrNull(instantMs: number | null): string | null {
  return instantMs === null ? null : new Date(instantMs).toISOString();
}

export function iso(instantMs: number): string {
  return new Date(instantMs).toISOString();
}

export function jobToWire(job: JobRecord): Record<string, unknown> {
  return {
    job_id: job.jobId,
    team: job.team,
    ...job.spec,
    state: job.state,
    next_fire_at: isoOrNull(job.nextFireAtMs),
    next_scheduled_at: isoOrNull(job.nextScheduledAtMs),
    created_at: iso(job.createdAtMs),
    updated_at: iso(job.updatedAtMs),
  };
}

export function runToWire(run: RunRecord): Record<string, unknown> {
  return {
    run_id: run.runId,
    job_id: run.jobId,
    team: run.team,
    pool: run.pool,
    lane: run.lane,
    scheduled_at: iso(run.scheduledAtMs),
    fire_at: iso(run.fireAtMs),
    dispatched_at: isoOrNull(run.dispatchedAtMs),
    attempt: run.attempt,
    status: run.status,
    started_at: isoOrNull(run.startedAtMs),
    finished_at: isoOrNull(run.finishedAtMs),
    last_error: run.lastError,
    result: run.result ?? null,
    ready_at: isoOrNull(run.readyAtMs),
    lease_expires_at: isoOrNull(run.leaseExpiresAtMs),
    worker_id: run.workerId,
  };
}

export function eventToWire(event: RunEvent): Record<string, unknown> {
  return {
    sequence: event.sequence,
    at: iso(event.atMs),
    type: event.type,
    from_status: event.fromStatus,
    to_status: event.toStatus,
    detail: event.detail,
  };
}

export function runWithEventsToWire(run: RunWithEvents): Record<string, unknown> {
  return { ...runToWire(run), events: run.events.map(eventToWire) };
}

export function leasedRunToWire(run: LeasedRun): Record<string, unknown> {
  return {
    run_id: run.runId,
    job_id: run.jobId,
    team: run.team,
    attempt: run.attempt,
    scheduled_at: iso(run.scheduledAtMs),
    fire_at: iso(run.fireAtMs),
    dispatched_at: iso(run.dispatchedAtMs),
    payload: run.payload,
    fencing_token: run.fencingToken,
    lease_expires_at: iso(run.leaseExpiresAtMs),
  };
}
