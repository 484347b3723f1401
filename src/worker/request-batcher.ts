/**
 * Coalesces a worker's per-run calls (complete, heartbeat) into batch requests
 * (`POST /v1/runs:complete`, `/v1/runs:heartbeat`, extensions of API.md). At most one batch
 * is in flight; whatever is submitted while it travels goes out in the next one, the moment
 * it answers. So a quiet worker sends each call alone without waiting for a timer, and a
 * busy one sends one request (and the server does one group commit) per round trip instead
 * of one per run. Measured with 50 concurrent no-op handlers on SQLite: per-run completes
 * capped the worker path near 500 runs/s, one fsync each. With a `linger` (the worker's
 * completions), a batch smaller than its `items` waits until `ms` after the previous request
 * left, so a steady stream of calls, each arriving after the last answer, is not sent a few
 * at a time either.
 *
 * Each item answers for itself: a per-item error rejects only that item's promise, with a
 * `TicklerApiError` carrying the item's status and code. A batch that gets no good answer
 * at all (network error, 5xx, 429) rejects every item in it with that error, and callers
 * retry as they would a single call. A server that does not know the batch route (404) is
 * served call by call from then on.
 */
import { TicklerApiError } from './errors.js';
import type { ItemError } from './wire.js';

export type BatchItemResult<A> = { ok: true; value: A } | { ok: false; error: TicklerApiError };

export interface BatchTransport<I, A> {
  /** Sends one batch; answers one result per item, in order. */
  sendBatch(items: I[], timeoutMs: number | undefined): Promise<BatchItemResult<A>[]>;
  /** The per-run route, for a server without the batch route. */
  sendOne(item: I, timeoutMs: number | undefined): Promise<A>;
  /** Bytes the item adds to a request body, near enough to keep batches under the body limit. */
  bytesOf(item: I): number;
}

/**
 * A small batch waits for company: with fewer than `items` calls queued, the next request
 * leaves no sooner than `ms` after the previous one left (real time, like the worker's lease
 * linger). A caller whose calls come further apart than that sends each at once.
 */
export interface BatchLinger {
  ms: number;
  items: number;
}

export interface RequestBatcherOptions {
  /** Items per request; the server takes up to 1,000. */
  itemsMax: number;
  /** Body bytes per request; the server takes up to 16 MiB for a batch. */
  bytesMax: number;
  /** Called once when the server turns out not to know the batch route. */
  onBatchRouteMissing?: (error: TicklerApiError) => void;
  /** Off when absent. */
  linger?: BatchLinger;
  /** The linger's clock (performance.now() and setTimeout unless a test gives its own). */
  nowMs?: () => number;
  setTimer?: (callback: () => void, delayMs: number) => () => void;
}

interface Pending<I, A> {
  item: I;
  timeoutMs: number | undefined;
  resolve(value: A): void;
  reject(error: unknown): void;
}

export class RequestBatcher<I, A> {
  private queue: Pending<I, A>[] = [];
  private sending = false;
  private flushScheduled = false;
  private batchRouteKnown = true;
  private inFlightItemCount = 0;
  /** When the last request left (`nowMs`), for the linger. */
  private lastSentAtMs = Number.NEGATIVE_INFINITY;
  /** Ends the linger under way early (enough calls queued); null when not lingering. */
  private endLinger: (() => void) | null = null;
  private readonly nowMs: () => number;
  private readonly setTimer: (callback: () => void, delayMs: number) => () => void;
  /** Requests sent and items carried: items per request shows the coalescing. */
  readonly stats = { requests: 0, items: 0 };

  constructor(private readonly transport: BatchTransport<I, A>, private readonly options: RequestBatcherOptions) {
    if (!(options.itemsMax >= 1) || !(options.bytesMax >= 1)) throw new RangeError('batch limits must be positive');
    this.nowMs = options.nowMs ?? (() => performance.now());
    this.setTimer = options.setTimer ?? ((callback, delayMs) => {
      const handle = setTimeout(callback, delayMs);
      return () => clearTimeout(handle);
    });
  }

  /** Queues one call; `timeoutMs` bounds the request that carries it. */
  submit(item: I, timeoutMs?: number): Promise<A> {
    return new Promise<A>((resolve, reject) => {
      this.queue.push({ item, timeoutMs, resolve, reject });
      if (this.endLinger !== null && this.queue.length >= this.options.linger!.items) this.endLinger();
      this.scheduleFlush();
    });
  }

  /** Calls queued or in flight. */
  get pendingCount(): number {
    return this.queue.length + this.inFlightItemCount;
  }

  /**
   * The first flush waits one macrotask turn, so calls submitted by handlers that finished
   * together (a leased batch of quick handlers settles within one turn) share a request.
   */
  private scheduleFlush(): void {
    if (this.sending || this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(() => {
      this.flushScheduled = false;
      void this.pump();
    });
  }

  private async pump(): Promise<void> {
    if (this.sending) return;
    this.sending = true;
    try {
      while (this.queue.length > 0) {
        const lingerMs = this.lingerLeftMs();
        if (lingerMs > 0) {
          await this.lingerFor(lingerMs);
          continue;
        }
        this.lastSentAtMs = this.nowMs();
        const batch = this.takeBatch();
        this.inFlightItemCount = batch.length;
        await this.send(batch);
        this.inFlightItemCount = 0;
      }
    } finally {
      this.sending = false;
      this.inFlightItemCount = 0;
    }
  }

  /** How much longer a small batch waits for company; 0 when it goes now. */
  private lingerLeftMs(): number {
    const linger = this.options.linger;
    if (linger === undefined || this.queue.length >= linger.items) return 0;
    return this.lastSentAtMs + linger.ms - this.nowMs();
  }

  private lingerFor(delayMs: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const end = (): void => {
        this.endLinger = null;
        resolve();
      };
      const cancel = this.setTimer(end, delayMs);
      this.endLinger = () => {
        cancel();
        end();
      };
    });
  }

  private takeBatch(): Pending<I, A>[] {
    let bytes = 0;
    let count = 0;
    // At least one item per batch, however large, so an oversized one still gets its answer.
    while (count < this.queue.length && count < this.options.itemsMax) {
      const itemBytes = this.transport.bytesOf(this.queue[count]!.item);
      if (count > 0 && bytes + itemBytes > this.options.bytesMax) break;
      bytes += itemBytes;
      count++;
    }
    return this.queue.splice(0, count);
  }

  private async send(batch: Pending<I, A>[]): Promise<void> {
    this.stats.requests++;
    this.stats.items += batch.length;
    if (!this.batchRouteKnown) {
      await Promise.all(batch.map((pending) => this.transport.sendOne(pending.item, pending.timeoutMs)
        .then(pending.resolve, pending.reject)));
      return;
    }
    const timeouts = batch.map((pending) => pending.timeoutMs).filter((timeoutMs) => timeoutMs !== undefined);
    const timeoutMs = timeouts.length === 0 ? undefined : Math.min(...timeouts);
    let results: BatchItemResult<A>[];
    try {
      results = await this.transport.sendBatch(batch.map((pending) => pending.item), timeoutMs);
    } catch (error) {
      // The batch route never answers 404 as a whole (an unknown run is a 404 item): the route is missing.
      if (error instanceof TicklerApiError && error.status === 404) {
        this.batchRouteKnown = false;
        this.options.onBatchRouteMissing?.(error);
        await this.send(batch);
        return;
      }
      for (const pending of batch) pending.reject(error);
      return;
    }
    if (results.length !== batch.length) {
      const error = new TicklerApiError({ status: 200, code: 'invalid_answer',
        message: `a batch of ${batch.length} answered ${results.length} results` });
      for (const pending of batch) pending.reject(error);
      return;
    }
    batch.forEach((pending, index) => {
      const result = results[index]!;
      if (result.ok) pending.resolve(result.value);
      else pending.reject(result.error);
    });
  }
}

/**
 * An item sent alone through its single route, as a batch item: an error answer is the item's
 * own; anything else (no answer at all) is the request's, and rejects.
 */
export function aloneAsItem<A>(call: Promise<A>): Promise<BatchItemResult<A>> {
  return call.then((value) => ({ ok: true, value }), (error: unknown) => {
    if (error instanceof TicklerApiError) return { ok: false, error };
    throw error;
  });
}

/** The error of one failed item, as a single call would have thrown it. */
export function itemErrorOf(status: number, error: ItemError | undefined, route: string): TicklerApiError {
  return new TicklerApiError({
    status,
    code: error?.code ?? `http_${status}`,
    message: error?.message ?? `${route} item answered ${status}`,
    ...(error?.field === undefined ? {} : { field: error.field }),
  });
}
