/**
 * Records to wire shapes (API.md): snake_case, times as RFC 3339 UTC with milliseconds,
 * null where there is none. The job answer is the spec with defaults filled in plus what
 * tickler knows about it.
 */
import { specJsonOf } from '../domain/spec-json.js';
import { canonicalInstantMs } from '../domain/instant.js';
import type { JobRecord, RunEvent, RunRecord } from '../domain/types.js';
import type { LeasedRun, RunWithEvents } from '../store/store.js';
import type { LeasedRun as WireLeasedRun } from '../worker/wire.js';
import { apiIsoCacheEntriesCountMax } from '../limits.js';

export function isoOrNull(instantMs: number | null): string | null {
  return instantMs === null ? null : iso(instantMs);
}

/**
 * Formatted instants, remembered: the jobs of one batch share their created_at and
 * updated_at, a one-shot job's fire time is its scheduled time, and the runs of one lease
 * answer mostly share their scheduled, fire, dispatch and expiry instants, four values that
 * alternate (a one-entry memo missed on every field). Cleared when full, so it stays small.
 */
const isoCache = new Map<number, string>();

export function iso(instantMs: number): string {
  let text = isoCache.get(instantMs);
  if (text === undefined) {
    if (isoCache.size >= apiIsoCacheEntriesCountMax) isoCache.clear();
    text = new Date(instantMs).toISOString();
    isoCache.set(instantMs, text);
  }
  return text;
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

/**
 * `JSON.stringify(jobToWire(job))`, the same text, made without building the object: the
 * spec's members come from its JSON text (`specJsonOf`), which the store wrote or read
 * already. The create routes answer with it; a batch answers 1,000 of them.
 */
export function jobWireJson(job: JobRecord): string {
  const specMembers = specJsonOf(job.spec).slice(1, -1);
  const schedule = job.spec.schedule;
  // A one-shot job's times are usually its `at`, whose text is in normal form already: it is
  // used as it is where it reads as the same instant, instead of formatting the instant again.
  const atText = 'at' in schedule ? schedule.at : null;
  const atMs = atText === null ? null : canonicalInstantMs(atText);
  return `{"job_id":${JSON.stringify(job.jobId)},"team":${JSON.stringify(job.team)}${specMembers === '' ? '' : ','}${specMembers}`
    + `,"state":${JSON.stringify(job.state)},"next_fire_at":${isoJson(job.nextFireAtMs, atMs, atText)}`
    + `,"next_scheduled_at":${isoJson(job.nextScheduledAtMs, atMs, atText)},"created_at":"${iso(job.createdAtMs)}"`
    + `,"updated_at":"${iso(job.updatedAtMs)}"}`;
}

/**
 * The UTF-8 bytes of `head + items.map(textOf).join(',') + tail`, each item's text written
 * straight into one buffer as it is made. Joining first built a half-megabyte string for a
 * batch of 1,000 jobs, flattened and encoded in a second pass (0.70-0.83 against 0.37-0.43
 * us a job, CPU time, 1,000 answers of ~600 bytes). Texts are not kept until the end either,
 * so the heap holds none of them at once (no difference measured in batch throughput). The
 * buffer starts at 64 KiB and doubles as needed.
 */
export function joinedUtf8<T>(head: string, items: readonly T[], textOf: (item: T) => string, tail: string): Buffer {
  let buffer = Buffer.allocUnsafe(64 * 1024);
  let offset = 0;
  const append = (text: string): void => {
    // A code unit is at most 3 bytes: only a text that may not fit is measured.
    if (buffer.length - offset < text.length * 3) {
      const bytes = Buffer.byteLength(text);
      if (buffer.length - offset < bytes) {
        const grown = Buffer.allocUnsafe(Math.max(buffer.length * 2, offset + bytes));
        buffer.copy(grown, 0, 0, offset);
        buffer = grown;
      }
    }
    offset += buffer.write(text, offset);
  };
  append(head);
  items.forEach((item, index) => {
    if (index > 0) append(',');
    append(textOf(item));
  });
  append(tail);
  return buffer.subarray(0, offset);
}

/** The instant as a JSON string: `knownText` where it is the text of `knownMs`. */
function isoJson(instantMs: number | null, knownMs: number | null, knownText: string | null): string {
  if (instantMs === null) return 'null';
  return `"${instantMs === knownMs && knownText !== null ? knownText : iso(instantMs)}"`;
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

/**
 * One leased run's JSON text: `JSON.stringify` of the object API.md describes, made without
 * building it, with the payload's text as the store answered it (never parsed on this side).
 */
export function leasedRunWireJson(run: LeasedRun): string {
  return `{"run_id":${JSON.stringify(run.runId)},"job_id":${JSON.stringify(run.jobId)},"team":${JSON.stringify(run.team)}`
    + `,"attempt":${run.attempt},"scheduled_at":"${iso(run.scheduledAtMs)}","fire_at":"${iso(run.fireAtMs)}"`
    + `,"dispatched_at":"${iso(run.dispatchedAtMs)}","payload":${run.payloadJson}`
    + `,"fencing_token":${JSON.stringify(run.fencingToken)},"lease_expires_at":"${iso(run.leaseExpiresAtMs)}"`
    + `,"ready_at":"${iso(run.readyAtMs)}"}`;
}

/** `leasedRunWireJson`'s run as an object: a worker straight to PostgreSQL gets it without the text (src/direct-worker/postgres-direct.ts). */
export function leasedRunToWire(run: LeasedRun): WireLeasedRun {
  return {
    run_id: run.runId,
    job_id: run.jobId,
    team: run.team,
    attempt: run.attempt,
    scheduled_at: iso(run.scheduledAtMs),
    fire_at: iso(run.fireAtMs),
    dispatched_at: iso(run.dispatchedAtMs),
    payload: JSON.parse(run.payloadJson) as unknown,
    fencing_token: run.fencingToken,
    lease_expires_at: iso(run.leaseExpiresAtMs),
    ready_at: iso(run.readyAtMs),
  };
}
