/**
 * Group commit: calls arriving in the same event-loop turn, or while the transactions in
 * flight are busy, share one transaction (DESIGN.md "Storage"). A commit is one fsync
 * however many rows it carries, so coalescing is what makes thousands of single creates per
 * second possible. A transaction that failed for the database's reasons fails
 * every call it carried; one that failed on some call's input is retried call by call. A
 * call is never split across transactions, so its items commit together.
 */
import assert from 'node:assert/strict';

interface PendingCall<Item, Outcome> {
  items: Item[];
  resolve(outcomes: Outcome[]): void;
  reject(error: unknown): void;
}

export class GroupCommitter<Item, Outcome> {
  private readonly queue: PendingCall<Item, Outcome>[] = [];
  private inFlightCount = 0;
  private flushScheduled = false;

  /**
   * @param commit writes all items in one transaction, answering one outcome per item in order
   * @param itemsPerCommitMax calls are added to a transaction until this many items
   * @param commitsInFlightMax transactions running at once (connections used)
   */
  constructor(
    private readonly commit: (items: Item[]) => Promise<Outcome[]>,
    private readonly itemsPerCommitMax: number,
    private readonly commitsInFlightMax: number,
    /** True when a shared transaction failed for a reason one call may own (bad input), not for all. */
    private readonly isolateOn: (error: unknown) => boolean = () => false,
  ) {
    assert.ok(itemsPerCommitMax >= 1 && commitsInFlightMax >= 1);
  }

  submit(items: Item[]): Promise<Outcome[]> {
    if (items.length === 0) return Promise.resolve([]);
    return new Promise((resolve, reject) => {
      this.queue.push({ items, resolve, reject });
      this.scheduleFlush();
    });
  }

  private scheduleFlush(): void {
    if (this.flushScheduled || this.inFlightCount >= this.commitsInFlightMax || this.queue.length === 0) return;
    this.flushScheduled = true;
    // setImmediate lets every call made in this turn join before the transaction starts.
    setImmediate(() => {
      this.flushScheduled = false;
      this.flush();
    });
  }

  private flush(): void {
    if (this.inFlightCount >= this.commitsInFlightMax || this.queue.length === 0) return;
    const calls: PendingCall<Item, Outcome>[] = [];
    let itemCount = 0;
    while (this.queue.length > 0) {
      const next = this.queue[0]!;
      if (calls.length > 0 && itemCount + next.items.length > this.itemsPerCommitMax) break;
      calls.push(next);
      itemCount += next.items.length;
      this.queue.shift();
    }
    this.inFlightCount++;
    void this.run(calls).finally(() => {
      this.inFlightCount--;
      this.scheduleFlush();
    });
    this.scheduleFlush();
  }

  private async run(calls: PendingCall<Item, Outcome>[]): Promise<void> {
    let outcomes: Outcome[];
    try {
      outcomes = await this.commit(calls.flatMap((call) => call.items));
    } catch (error) {
      if (calls.length > 1 && this.isolateOn(error)) {
        // One caller's input may have failed everyone's transaction: retry each call alone
        // so that only its owner sees the error.
        for (const call of calls) await this.run([call]);
        return;
      }
      for (const call of calls) call.reject(error);
      return;
    }
    let offset = 0;
    for (const call of calls) {
      call.resolve(outcomes.slice(offset, offset + call.items.length));
      offset += call.items.length;
    }
  }
}
