/**
 * The recorded history of a chaos run: what the harness and its workers saw, each line a
 * JSON object stamped with `atMs` on one clock (the machine's wall clock; every process of
 * a chaos run shares it). The history checker reads nothing else. Times are epoch
 * milliseconds, converted from the API's RFC 3339 strings by whoever records them.
 *
 * Creates, cancels and pauses carry a `createId`: the harness's own name for a create
 * request, sent as the job's `key` and inside its payload, so a dispatch can be traced back
 * to its request even when the create's answer never arrived.
 */

/** The schedule of a create, as the checker needs it: a one-shot time or a cron rule. */
export type HistorySchedule = { atMs: number } | { cron: string; tz: string };

/** The policies of a job that decide which ledger outcomes count as handled. */
export interface HistoryJobPolicies {
  overlap: 'allow' | 'forbid' | 'replace' | 'buffer_one';
  catchUp: 'latest' | 'all' | 'none';
  dstGap: 'shift' | 'skip';
  toleranceMs: number;
}

export interface CreateSentEvent {
  type: 'create_sent';
  atMs: number;
  createId: string;
  schedule: HistorySchedule;
  policies: HistoryJobPolicies;
}

/** A 200/201 answer to a create (or to its repetition with the same key). */
export interface CreateAckedEvent {
  type: 'create_acked';
  atMs: number;
  createId: string;
  jobId: string;
  /** The server's `created_at`: a cron job's first occurrence is strictly after it. */
  createdAtMs: number;
}

/** A definite refusal (4xx): nothing was created. */
export interface CreateFailedEvent {
  type: 'create_failed';
  atMs: number;
  createId: string;
  status: number;
  code: string;
}

/** No answer, or a 5xx: the job may or may not exist. */
export interface CreateUnknownEvent {
  type: 'create_unknown';
  atMs: number;
  createId: string;
  error: string;
}

export type ControlKind = 'cancel' | 'pause' | 'resume';

export interface ControlSentEvent {
  type: 'control_sent';
  atMs: number;
  kind: ControlKind;
  jobId: string;
}

/** The answer to a cancel, pause or resume: `acked` (2xx), `failed` (4xx) or `unknown`. */
export interface ControlAnswerEvent {
  type: 'control_answer';
  atMs: number;
  kind: ControlKind;
  jobId: string;
  outcome: 'acked' | 'failed' | 'unknown';
  detail?: string;
}

/** A run handed to a worker by `POST /v1/workers/lease`, recorded before its handler starts. */
export interface DispatchEvent {
  type: 'dispatch';
  atMs: number;
  worker: string;
  runId: string;
  jobId: string;
  /** From the payload; absent for runs of jobs the harness did not create. */
  createId?: string;
  scheduledAtMs: number;
  fireAtMs: number;
  attempt: number;
  fencingToken: string;
  leaseExpiresAtMs: number;
  /**
   * The run's `ready_at` from the lease answer, when later than the answer's arrival: a run
   * leased ahead, which the worker holds until then (its handler start is a HandlerStartEvent).
   */
  readyAtMs?: number;
}

/** A chaos worker's handler starting an attempt, on the machine's clock. */
export interface HandlerStartEvent {
  type: 'handler_start';
  atMs: number;
  worker: string;
  runId: string;
  attempt: number;
}

export type AnswerOutcome = 'accepted' | 'stale_token' | 'cancelled' | 'not_found' | 'error' | 'unknown';

export interface CompletionEvent {
  type: 'completion';
  /** When the answer arrived. */
  atMs: number;
  sentAtMs: number;
  worker: string;
  runId: string;
  fencingToken: string;
  status: 'succeeded' | 'failed' | 'failed_permanent';
  outcome: AnswerOutcome;
}

export interface HeartbeatEvent {
  type: 'heartbeat';
  atMs: number;
  sentAtMs: number;
  worker: string;
  runId: string;
  fencingToken: string;
  outcome: AnswerOutcome;
  /** The new expiry, on an accepted heartbeat. */
  leaseExpiresAtMs?: number;
}

export type FaultKind =
  | 'scheduler_kill'
  | 'scheduler_stop'
  | 'worker_kill'
  | 'worker_stop'
  | 'postgres_restart'
  | 'api_kill';

export interface FaultStartEvent {
  type: 'fault_start';
  atMs: number;
  faultId: string;
  kind: FaultKind;
  target: string;
}

export interface FaultEndEvent {
  type: 'fault_end';
  atMs: number;
  faultId: string;
}

/**
 * A sample of a monotonic counter of one process incarnation (a restarted process starts
 * again at zero), e.g. `tickler_dispatch_rejected_stale_token_total`.
 */
export interface CounterSampleEvent {
  type: 'counter_sample';
  atMs: number;
  process: string;
  incarnation: number;
  name: string;
  value: number;
}

/** One run event of the ledger dump (`GET /v1/runs/{run_id}`). */
export interface LedgerRunEvent {
  atMs: number;
  type: string;
  toStatus: string | null;
  attempt?: number;
  /** A `dispatched` event of a run written ahead of its fire time (leasable from its `fire_at`). */
  ahead?: true;
  /** A `dispatched` event written by its job's create, the job being due when created. */
  atCreate?: true;
}

/** One run of the ledger dump, taken after the drain. */
export interface LedgerRunRecord {
  type: 'ledger_run';
  atMs: number;
  runId: string;
  jobId: string;
  scheduledAtMs: number;
  fireAtMs: number;
  dispatchedAtMs: number | null;
  attempt: number;
  status: string;
  events: LedgerRunEvent[];
}

/**
 * One `dispatched` run event of the ledger, read from the database after the drain with its
 * place in the event sequence and the shard token its dispatch held. The sink locks the shard
 * row for the whole dispatch, so on any one shard the accepted tokens must never go down as
 * the sequence goes up: one that does was accepted after a newer token had been granted.
 */
export interface LedgerDispatchEvent {
  type: 'ledger_dispatch';
  atMs: number;
  runId: string;
  sequence: number;
  shardToken: string;
}

/** One job of the ledger dump. */
export interface LedgerJobRecord {
  type: 'ledger_job';
  atMs: number;
  jobId: string;
  state: string;
  nextScheduledAtMs: number | null;
}

/**
 * A process of the run that could not be started (a first start, or a restart after a kill):
 * the harness's record, with the process's own last words — `tickler: cannot listen on
 * 127.0.0.1:P: address already in use (EADDRINUSE)` when another process holds its port.
 */
export interface NodeStartFailedEvent {
  type: 'node_start_failed';
  atMs: number;
  process: string;
  reason: string;
}

/**
 * An answer a client of the run got from a process that is not one of the run's nodes: it
 * did not carry the run's tag (run-tag.ts). The client used nothing of it.
 */
export interface ForeignAnswerEvent {
  type: 'foreign_answer';
  atMs: number;
  /** Who asked: a worker's name, `driver`, `sampler`, `ledger`. */
  client: string;
  url: string;
  /** The run tag the answer carried; null for none. */
  tag: string | null;
  /** This run's tag. */
  expected: string;
}

/** Marks the harness's phases; informative only. */
export interface PhaseEvent {
  type: 'phase';
  atMs: number;
  phase: string;
}

export type HistoryEvent =
  | CreateSentEvent
  | CreateAckedEvent
  | CreateFailedEvent
  | CreateUnknownEvent
  | ControlSentEvent
  | ControlAnswerEvent
  | DispatchEvent
  | HandlerStartEvent
  | CompletionEvent
  | HeartbeatEvent
  | FaultStartEvent
  | FaultEndEvent
  | CounterSampleEvent
  | LedgerRunRecord
  | LedgerDispatchEvent
  | LedgerJobRecord
  | NodeStartFailedEvent
  | ForeignAnswerEvent
  | PhaseEvent;

export type HistoryEventType = HistoryEvent['type'];

/** Parses JSONL text into events; a line that is not an event object is an error with its number. */
export function parseHistory(text: string): HistoryEvent[] {
  const events: HistoryEvent[] = [];
  const lines = text.split('\n');
  for (let index = 0; index < lines.length; index++) {
    const line = lines[index]?.trim() ?? '';
    if (line === '') continue;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (error) {
      // A process killed mid-write can leave a torn last line; anywhere else it is corruption.
      if (index >= lines.length - 2) continue;
      throw new Error(`history line ${index + 1} is not JSON`, { cause: error });
    }
    if (typeof value !== 'object' || value === null || typeof (value as { type?: unknown }).type !== 'string'
      || typeof (value as { atMs?: unknown }).atMs !== 'number') {
      throw new Error(`history line ${index + 1} is not an event: ${line.slice(0, 200)}`);
    }
    events.push(value as HistoryEvent);
  }
  return events;
}

/** Merges histories recorded by several processes into one, ordered by time (stable). */
export function mergeHistories(histories: HistoryEvent[][]): HistoryEvent[] {
  return histories.flat().map((event, index) => ({ event, index }))
    .sort((left, right) => left.event.atMs - right.event.atMs || left.index - right.index)
    .map(({ event }) => event);
}
