/**
 * Coalesced creates: with `coalesceCreates: true`, concurrent `TicklerClient.createJob` calls
 * share `POST /v1/jobs:batch` requests, through the same `RequestBatcher` as the worker's
 * completions. It is the HTTP counterpart of ioredis auto-pipelining, which is what makes
 * BullMQ's one-at-a-time `queue.add` fast: 64 callers each awaiting its own create cost the
 * server 64 requests, and measured on SQLite (bench:peers W1) that capped them near 11,000
 * jobs/s where batches of 1,000 reach ~73,000.
 *
 * Each caller gets what a single create would have given it:
 * - an item answered 201 or 200 (a key and body repeated) resolves to its job, as the single
 *   route's body is the same job text;
 * - an item's error rejects that caller alone with the item's status, code, message and field,
 *   which the batch route takes from the same checks as the single one;
 * - a batch of ONE goes to `POST /v1/jobs` itself: a quiet caller's answer, errors and headers
 *   (`Retry-After`) are then byte for byte today's, and the request costs the same;
 * - a batch refused as a whole as bad input (400, 413) wrote nothing, and one of its items is
 *   to blame (nesting two levels deeper in the batch body than alone, a `__proto__` key, an
 *   estimate of the body size gone wrong): each item is then sent alone, so the item at fault
 *   gets its own single answer and its neighbours are created;
 * - a batch with no good answer at all (network error, 5xx, 429, 401) rejects every caller in it
 *   with that error, as a single create would have been rejected, and callers retry.
 *   A create whose request got no answer may or may not exist, exactly as with a single create:
 *   a caller that retries should give its jobs a `key`, so a repeat answers the same job;
 * - a server without the batch route (404 to the whole batch) gets single creates from then on.
 */
import { batchJobsMax, batchRequestBodyBytesMax, clientCreateBatchEnvelopeBytes } from '../limits.js';
import { TicklerApiError } from './errors.js';
import { RequestBatcher, aloneAsItem, itemErrorOf, type BatchItemResult } from './request-batcher.js';
import type { BatchIdResult, BatchResult, Job } from './wire.js';

/** A create as it will travel: the body's JSON text, serialized once for both routes. */
export interface CreateText {
  text: string;
  bytes: number;
}

/**
 * What a coalesced create answers its caller: the whole job (`createJob`), or only its id
 * (`createJobId`, whose batches ask for `answer: "id"` and so skip the job's text both ways).
 */
export interface CreateRoutes<T> {
  /** `POST /v1/jobs` with this body text, answered as T. */
  createOne(text: string, timeoutMs: number | undefined): Promise<T>;
  /** `POST /v1/jobs:batch` with these item texts, in order. */
  createBatch(texts: string[], timeoutMs: number | undefined): Promise<{ results: (BatchResult | BatchIdResult)[] }>;
  /** An accepted item's value, or undefined when the item carries none. */
  valueOf(result: BatchResult | BatchIdResult): T | undefined;
}

export type CreateBatcher<T = Job> = RequestBatcher<CreateText, T>;


export function createBatcher<T>(routes: CreateRoutes<T>, onBatchRouteMissing: (error: TicklerApiError) => void):
  CreateBatcher<T> {
  const sendAlone = (item: CreateText, timeoutMs: number | undefined): Promise<BatchItemResult<T>> =>
    aloneAsItem(routes.createOne(item.text, timeoutMs));
  return new RequestBatcher<CreateText, T>({
    async sendBatch(items, timeoutMs) {
      if (items.length === 1) return [await sendAlone(items[0]!, timeoutMs)];
      let results: (BatchResult | BatchIdResult)[];
      try {
        ({ results } = await routes.createBatch(items.map((item) => item.text), timeoutMs));
      } catch (error) {
        if (!(error instanceof TicklerApiError && (error.status === 400 || error.status === 413))) throw error;
        return Promise.all(items.map((item) => sendAlone(item, timeoutMs)));
      }
      return results.map((result): BatchItemResult<T> => {
        const value = result.status === 201 || result.status === 200 ? routes.valueOf(result) : undefined;
        return value !== undefined
          ? { ok: true, value }
          : { ok: false, error: itemErrorOf(result.status, 'error' in result ? result.error : undefined, 'POST /v1/jobs:batch') };
      });
    },
    sendOne: (item, timeoutMs) => routes.createOne(item.text, timeoutMs),
    // The comma between items.
    bytesOf: (item) => item.bytes + 1,
  }, { itemsMax: batchJobsMax, bytesMax: batchRequestBodyBytesMax - clientCreateBatchEnvelopeBytes, onBatchRouteMissing });
}
