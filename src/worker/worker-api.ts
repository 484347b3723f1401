/**
 * The calls a worker makes, and nothing else: lease, heartbeat and complete, one run at a
 * time or in batches. `TicklerClient` makes them over HTTP (API.md, "Workers");
 * `PostgresWorkerApi` (src/direct-worker/postgres-direct.ts) makes the same calls straight to tickler's
 * PostgreSQL store. Answers are the wire shapes of API.md either way, and errors are
 * `TicklerApiError`s with the status and code the HTTP route would have answered.
 */
import type {
  CompleteBatchItem,
  CompleteBatchStatusResult,
  CompleteRequest,
  HeartbeatBatchItem,
  HeartbeatBatchResult,
  ItemError,
  LeasedRun,
  LeaseRequest,
} from './wire.js';

/** Per call: a signal to abort it, and a timeout. */
export interface RequestOptions {
  signal?: AbortSignal;
  timeoutMs?: number;
}

export interface WorkerApi {
  /** Waits up to `wait_s` for runs of the pool. */
  leaseRuns(body: LeaseRequest, options?: RequestOptions): Promise<{ runs: LeasedRun[] }>;
  heartbeat(runId: string, fencingToken: string, options?: RequestOptions): Promise<{ lease_expires_at: string }>;
  completeRun(runId: string, body: CompleteRequest, options?: RequestOptions): Promise<unknown>;
  /** Each item answers for itself, in order; an accepted one with the run (unread by the worker). */
  completeRuns(completions: CompleteBatchItem[], options?: RequestOptions): Promise<{ results: { status: number; error?: ItemError }[] }>;
  /** As `completeRuns`; an accepted item answers its status alone. */
  completeRunsBriefly(completions: CompleteBatchItem[], options?: RequestOptions): Promise<{ results: CompleteBatchStatusResult[] }>;
  heartbeatRuns(heartbeats: HeartbeatBatchItem[], options?: RequestOptions): Promise<{ results: HeartbeatBatchResult[] }>;
}
