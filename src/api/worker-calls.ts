/**
 * What the worker calls' HTTP routes and the same calls made straight to PostgreSQL
 * (`src/direct-worker/postgres-direct.ts`) share: a lease body read as a long-poll request, and the
 * items of the batches (`POST /v1/runs:complete` and `/v1/runs:heartbeat`), each checked on
 * its own and answering for itself, in request order, with its status and its value or its
 * error document.
 */
import type { Static } from 'typebox';
import { Compile } from 'typebox/compile';
import { TicklerError } from '../errors.js';
import type { RunRecord } from '../domain/types.js';
import type { Metrics } from '../obs/metrics.js';
import type { LeaseWaitRequest } from '../service/lease-waiters.js';
import type { ItemOutcome, RunService } from '../service/run-service.js';
import type { TeamScope } from '../store/store.js';
import { schemaIssueToError, toTicklerError } from './http-errors.js';
import { checkId } from './route-helpers.js';
import { CompleteItem, HeartbeatItem, type LeaseBody } from './schemas.js';
import { iso, runToWire } from './wire.js';

/** `POST /v1/workers/lease`'s body (already checked against `LeaseBody`) as a long-poll request. */
export function leaseWaitRequestOf(body: Static<typeof LeaseBody>, scope: TeamScope, signal: AbortSignal | undefined): LeaseWaitRequest {
  return {
    scope,
    pool: body.pool,
    max: body.max ?? 1,
    leaseMs: body.lease_s === undefined ? null : body.lease_s * 1000,
    workerId: body.worker_id ?? null,
    aheadMs: body.ahead_ms ?? 0,
    ...(body.max_ready === undefined ? {} : { readyMax: body.max_ready }),
    waitMs: Math.round((body.wait_s ?? 0) * 1000),
    ...(signal === undefined ? {} : { signal }),
  };
}

const checkCompleteItem = Compile(CompleteItem);
const checkHeartbeatItem = Compile(HeartbeatItem);

/** One item of a batch answer: its own status, and the value or the error document. */
export type ItemAnswer<K extends string> = { status: number; error: ReturnType<TicklerError['toBody']>['error'] }
  | ({ status: 200 } & Partial<Record<K, unknown>>);

interface ItemValidator<T> {
  Check(value: unknown): value is T;
  Errors(value: unknown): Parameters<typeof schemaIssueToError>[0];
}

/** An item's schema and id checks; its error is its answer, the batch goes on. */
function checkItem<T extends { run_id: string }>(validator: ItemValidator<T>, item: unknown): T | TicklerError {
  if (!validator.Check(item)) return schemaIssueToError(validator.Errors(item));
  try {
    checkId(item.run_id, 'run');
  } catch (error) {
    if (error instanceof TicklerError) return error;
    throw error;
  }
  return item;
}

/**
 * Puts the store's outcomes back among the items that failed validation, in request order;
 * a success carries its value under `name` unless `toWire` is null.
 * An id that cannot exist answers 404 like an unknown one (without a lookup); an error that
 * is not the client's (an outage, a bug) answers for its item only, and is logged.
 */
function mergeInOrder<I, T, K extends string>(
  checked: readonly (I | TicklerError)[],
  outcomes: readonly ItemOutcome<T>[],
  toWire: ((value: T) => unknown) | null,
  name: K,
  log: { error(context: object, message: string): void },
  metrics: Metrics,
): ItemAnswer<K>[] {
  let next = 0;
  return checked.map((item): ItemAnswer<K> => {
    const outcome: ItemOutcome<T> = item instanceof TicklerError ? { ok: false, error: item } : outcomes[next++]!;
    if (outcome.ok) return (toWire === null ? { status: 200 } : { status: 200, [name]: toWire(outcome.value) }) as ItemAnswer<K>;
    let error = toTicklerError(outcome.error);
    if (error === null) {
      log.error({ err: outcome.error }, 'batch item failed');
      error = new TicklerError('internal', 'internal error; see the server log');
    }
    metrics.httpErrorsTotal.inc({ code: error.code });
    return { status: error.status, error: error.toBody().error };
  });
}

/** Where a batch's failed items are logged and counted. */
export interface BatchSink {
  log: { error(context: object, message: string): void };
  metrics: Metrics;
}

/**
 * A batch of completions: each item checked, the valid ones recorded in one group commit, each
 * answering for itself in order; an accepted item carries its run unless `wantRuns` is false
 * (`answer: "status"`: the store then does not read the run back either).
 */
export async function completeItems(runs: RunService, scope: TeamScope, items: readonly unknown[], wantRuns: boolean,
  sink: BatchSink): Promise<ItemAnswer<'run'>[]> {
  const checked = items.map((item) => checkItem(checkCompleteItem, item));
  const valid = checked.filter((item): item is CompleteItem => !(item instanceof TicklerError));
  const outcomes = await runs.completeMany(scope, valid.map((item) => ({
    runId: item.run_id,
    completion: { fencingToken: item.fencing_token, status: item.status, error: item.error ?? null, result: item.result ?? null },
  })), wantRuns);
  const toWire = wantRuns ? (run: RunRecord | null) => {
    if (run === null) throw new Error('the store answered a completion without its run');
    return runToWire(run);
  } : null;
  return mergeInOrder(checked, outcomes, toWire, 'run', sink.log, sink.metrics);
}

/** A batch of heartbeats, as `completeItems`: each item answers its new lease expiry or its error. */
export async function heartbeatItems(runs: RunService, scope: TeamScope, items: readonly unknown[], sink: BatchSink):
  Promise<ItemAnswer<'lease_expires_at'>[]> {
  const checked = items.map((item) => checkItem(checkHeartbeatItem, item));
  const valid = checked.filter((item): item is HeartbeatItem => !(item instanceof TicklerError));
  const outcomes = await runs.heartbeatMany(scope, valid.map((item) => ({ runId: item.run_id, fencingToken: item.fencing_token })));
  return mergeInOrder(checked, outcomes, (expiresAtMs) => iso(expiresAtMs), 'lease_expires_at', sink.log, sink.metrics);
}
