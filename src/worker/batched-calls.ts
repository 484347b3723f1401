/**
 * The worker's batched calls: completions through `POST /v1/runs:complete` and heartbeats
 * through `POST /v1/runs:heartbeat` (extensions of API.md), each coalesced by a
 * `RequestBatcher`, falling back to the per-run routes on a server without them.
 */
import { batchRequestBodyBytesMax, leaseBatchMax } from '../limits.js';
import type { TicklerClient } from './client.js';
import { RequestBatcher, itemErrorOf } from './request-batcher.js';
import type { CompleteBatchItem, HeartbeatBatchItem } from './wire.js';

/** Half the server's batch body limit: the estimate below leaves out JSON punctuation. */
const batchBytesMax = batchRequestBodyBytesMax / 2;
/** An item's fields besides its result and error text, generously. */
const itemOverheadBytes = 256;

export type CompletionBatcher = RequestBatcher<CompleteBatchItem, unknown>;
export type HeartbeatBatcher = RequestBatcher<HeartbeatBatchItem, { lease_expires_at: string }>;

export function completionBatcher(client: TicklerClient, onBatchRouteMissing: () => void): CompletionBatcher {
  return new RequestBatcher<CompleteBatchItem, unknown>({
    async sendBatch(items, timeoutMs) {
      const { results } = await client.completeRuns(items, timeoutMs === undefined ? {} : { timeoutMs });
      return results.map((result) => result.status === 200 && 'run' in result
        ? { ok: true, value: result.run }
        : { ok: false, error: itemErrorOf(result.status, 'error' in result ? result.error : undefined, 'POST /v1/runs:complete') });
    },
    sendOne: ({ run_id: runId, ...body }, timeoutMs) =>
      client.completeRun(runId, body, timeoutMs === undefined ? {} : { timeoutMs }),
    bytesOf: (item) => itemOverheadBytes
      + (item.result === undefined ? 0 : Buffer.byteLength(JSON.stringify(item.result) ?? '', 'utf8'))
      + (item.error === undefined ? 0 : Buffer.byteLength(JSON.stringify(item.error), 'utf8')),
  }, { itemsMax: leaseBatchMax, bytesMax: batchBytesMax, onBatchRouteMissing });
}

export function heartbeatBatcher(client: TicklerClient, onBatchRouteMissing: () => void): HeartbeatBatcher {
  return new RequestBatcher<HeartbeatBatchItem, { lease_expires_at: string }>({
    async sendBatch(items, timeoutMs) {
      const { results } = await client.heartbeatRuns(items, timeoutMs === undefined ? {} : { timeoutMs });
      return results.map((result) => result.status === 200 && 'lease_expires_at' in result
        ? { ok: true, value: { lease_expires_at: result.lease_expires_at } }
        : { ok: false, error: itemErrorOf(result.status, 'error' in result ? result.error : undefined, 'POST /v1/runs:heartbeat') });
    },
    sendOne: (item, timeoutMs) =>
      client.heartbeat(item.run_id, item.fencing_token, timeoutMs === undefined ? {} : { timeoutMs }),
    bytesOf: () => itemOverheadBytes,
  }, { itemsMax: leaseBatchMax, bytesMax: batchBytesMax, onBatchRouteMissing });
}
