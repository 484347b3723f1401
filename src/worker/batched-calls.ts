/**
 * The worker's batched calls: completions through `POST /v1/runs:complete` and heartbeats
 * through `POST /v1/runs:heartbeat` (extensions of API.md), each coalesced by a
 * `RequestBatcher`, falling back to the per-run routes on a server without them.
 */
import { batchRequestBodyBytesMax, leaseBatchMax, workerBatchItemOverheadBytes } from '../limits.js';
import type { WorkerApi } from './worker-api.js';
import { RequestBatcher, itemErrorOf, type BatchLinger } from './request-batcher.js';
import { TicklerApiError } from './errors.js';
import type { CompleteBatchItem, HeartbeatBatchItem, ItemError } from './wire.js';

/** Half the server's batch body limit: the estimate below leaves out JSON punctuation. */
const batchBytesMax = batchRequestBodyBytesMax / 2;

export type CompletionBatcher = RequestBatcher<CompleteBatchItem, unknown>;
export type HeartbeatBatcher = RequestBatcher<HeartbeatBatchItem, { lease_expires_at: string }>;

/**
 * Completions ask for brief answers (`answer: 'status'`): an attempt needs only to know its
 * completion was accepted. A server older than that option rejects the field (400 on
 * `answer`); the batcher then asks for whole runs from there on.
 */
export function completionBatcher(client: WorkerApi, onBatchRouteMissing: () => void, linger?: BatchLinger):
  CompletionBatcher {
  let brief = true;
  const send = async (items: CompleteBatchItem[], timeoutMs: number | undefined): Promise<{ status: number; error?: ItemError }[]> => {
    const options = timeoutMs === undefined ? {} : { timeoutMs };
    if (!brief) return (await client.completeRuns(items, options)).results;
    try {
      return (await client.completeRunsBriefly(items, options)).results;
    } catch (error) {
      if (!(error instanceof TicklerApiError && error.status === 400 && error.field === 'answer')) throw error;
      brief = false;
      return (await client.completeRuns(items, options)).results;
    }
  };
  return new RequestBatcher<CompleteBatchItem, unknown>({
    async sendBatch(items, timeoutMs) {
      const results = await send(items, timeoutMs);
      return results.map((result) => result.status === 200
        ? { ok: true, value: undefined }
        : { ok: false, error: itemErrorOf(result.status, result.error, 'POST /v1/runs:complete') });
    },
    sendOne: ({ run_id: runId, ...body }, timeoutMs) =>
      client.completeRun(runId, body, timeoutMs === undefined ? {} : { timeoutMs }),
    bytesOf: (item) => workerBatchItemOverheadBytes
      + (item.result === undefined ? 0 : Buffer.byteLength(JSON.stringify(item.result) ?? '', 'utf8'))
      + (item.error === undefined ? 0 : Buffer.byteLength(JSON.stringify(item.error), 'utf8')),
  }, { itemsMax: leaseBatchMax, bytesMax: batchBytesMax, onBatchRouteMissing, ...(linger === undefined ? {} : { linger }) });
}

export function heartbeatBatcher(client: WorkerApi, onBatchRouteMissing: () => void): HeartbeatBatcher {
  return new RequestBatcher<HeartbeatBatchItem, { lease_expires_at: string }>({
    async sendBatch(items, timeoutMs) {
      const { results } = await client.heartbeatRuns(items, timeoutMs === undefined ? {} : { timeoutMs });
      return results.map((result) => result.status === 200 && 'lease_expires_at' in result
        ? { ok: true, value: { lease_expires_at: result.lease_expires_at } }
        : { ok: false, error: itemErrorOf(result.status, 'error' in result ? result.error : undefined, 'POST /v1/runs:heartbeat') });
    },
    sendOne: (item, timeoutMs) =>
      client.heartbeat(item.run_id, item.fencing_token, timeoutMs === undefined ? {} : { timeoutMs }),
    bytesOf: () => workerBatchItemOverheadBytes,
  }, { itemsMax: leaseBatchMax, bytesMax: batchBytesMax, onBatchRouteMissing });
}
