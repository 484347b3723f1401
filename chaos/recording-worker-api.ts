/**
 * What a chaos worker straight to PostgreSQL saw: a `WorkerApi` (src/worker/worker-api.ts)
 * around `PostgresWorkerApi` that writes every lease, heartbeat and completion, and the
 * store's answer to each, to the worker's history, with the records recording-fetch.ts writes
 * for a worker over HTTP, so the history checker judges both alike. An error thrown for a
 * whole call stands for the answer an HTTP route would have sent: its status and code.
 *
 * It plays the `outlive` behaviour's part as recording-fetch.ts does: a silenced attempt's
 * heartbeats never reach the store and are answered as if accepted.
 */
import { TicklerApiError } from '../src/worker/errors.js';
import type { WorkerApi } from '../src/worker/worker-api.js';
import type { CompleteBatchItem, HeartbeatBatchItem, HeartbeatBatchResult, ItemError } from '../src/worker/wire.js';
import { outcomeOfAnswer, workerCallRecorder, type ItemAnswer, type RecordingFetchOptions, type WorkerCall } from './recording-fetch.js';

/** The answers a call that threw stands for: one per call, all alike. */
function answersOfError(error: unknown, count: number): ItemAnswer[] {
  const outcome = error instanceof TicklerApiError ? outcomeOfAnswer(error.status, error.code) : 'unknown';
  return Array.from({ length: count }, () => ({ outcome }));
}

function answerOfItem(result: { status: number; error?: ItemError; lease_expires_at?: string }): ItemAnswer {
  return {
    outcome: outcomeOfAnswer(result.status, result.error?.code),
    ...(result.lease_expires_at === undefined ? {} : { leaseExpiresAtMs: Date.parse(result.lease_expires_at) }),
  };
}

export function recordingWorkerApi(inner: WorkerApi, options: Omit<RecordingFetchOptions, 'fetch'>): WorkerApi {
  const { recordCalls, recordLeases, isSilenced } = workerCallRecorder(options);
  const fakeExpiry = (): string => new Date(options.nowMs()).toISOString();

  /** Sends, records each answer in order (or the error for all), answers the SDK. */
  async function recorded<T extends { results: { status: number; error?: ItemError; lease_expires_at?: string }[] }>(
    kind: 'heartbeat' | 'completion', calls: WorkerCall[], send: () => Promise<T>): Promise<T> {
    const sentAtMs = options.nowMs();
    let answer: T;
    try {
      answer = await send();
    } catch (error) {
      recordCalls(kind, sentAtMs, calls, answersOfError(error, calls.length));
      throw error;
    }
    recordCalls(kind, sentAtMs, calls, answer.results.map(answerOfItem));
    return answer;
  }

  async function single<T>(kind: 'heartbeat' | 'completion', call: WorkerCall, send: () => Promise<T>,
    expiryOf: (answer: T) => string | undefined): Promise<T> {
    const sentAtMs = options.nowMs();
    try {
      const answer = await send();
      const expiry = expiryOf(answer);
      recordCalls(kind, sentAtMs, [call], [{ outcome: 'accepted', ...(expiry === undefined ? {} : { leaseExpiresAtMs: Date.parse(expiry) }) }]);
      return answer;
    } catch (error) {
      recordCalls(kind, sentAtMs, [call], answersOfError(error, 1));
      throw error;
    }
  }

  const completionCalls = (items: readonly CompleteBatchItem[]): WorkerCall[] =>
    items.map((item) => ({ runId: item.run_id, fencingToken: item.fencing_token, status: item.status }));

  return {
    async leaseRuns(body, requestOptions) {
      const answer = await inner.leaseRuns(body, requestOptions);
      recordLeases(answer);
      return answer;
    },
    heartbeat(runId, fencingToken, requestOptions) {
      if (isSilenced(fencingToken)) return Promise.resolve({ lease_expires_at: fakeExpiry() });
      return single('heartbeat', { runId, fencingToken }, () => inner.heartbeat(runId, fencingToken, requestOptions),
        (answer) => answer.lease_expires_at);
    },
    completeRun(runId, body, requestOptions) {
      return single('completion', { runId, fencingToken: body.fencing_token, status: body.status },
        () => inner.completeRun(runId, body, requestOptions), () => undefined);
    },
    completeRuns(completions, requestOptions) {
      return recorded('completion', completionCalls(completions), () => inner.completeRuns(completions, requestOptions));
    },
    completeRunsBriefly(completions, requestOptions) {
      return recorded('completion', completionCalls(completions), () => inner.completeRunsBriefly(completions, requestOptions));
    },
    async heartbeatRuns(heartbeats: HeartbeatBatchItem[], requestOptions) {
      const sent = heartbeats.filter((item) => !isSilenced(item.fencing_token));
      const sentAnswer = sent.length === 0 ? { results: [] as HeartbeatBatchResult[] }
        : await recorded('heartbeat', sent.map((item) => ({ runId: item.run_id, fencingToken: item.fencing_token })),
          () => inner.heartbeatRuns(sent, requestOptions));
      let next = 0;
      return {
        results: heartbeats.map((item): HeartbeatBatchResult => (isSilenced(item.fencing_token)
          ? { status: 200, lease_expires_at: fakeExpiry() }
          : sentAnswer.results[next++]!)),
      };
    },
  };
}
