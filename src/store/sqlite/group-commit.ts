/**
 * Group commit: write operations that arrive in the same event-loop turn share one
 * transaction, so one fsync serves them all (DESIGN.md "Storage"; STYLE.md §6). Each
 * operation runs in its own savepoint inside the group's transaction, so one that throws
 * rolls back alone and the others commit. Callers are answered only after the commit.
 *
 * better-sqlite3 commits synchronously, which blocks the loop; requests that arrive
 * meanwhile queue up in the kernel and are read in the next turn, so a busy server hands
 * the next flush a bigger group by itself. A group is bounded by `weightMax` (items, not
 * operations) so one flush never holds the loop for long.
 */
export type OperationOutcome = { ok: true; value: unknown } | { ok: false; error: unknown };

export interface QueuedOperation {
  /** Runs inside the group's transaction (nested transactions become savepoints). */
  run(): unknown;
  /** Called after the commit with what `run` answered, for notifications. */
  afterCommit(value: unknown): void;
  weight: number;
}

interface PendingOperation extends QueuedOperation {
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

export class GroupCommitQueue {
  private pending: PendingOperation[] = [];
  private flushScheduled = false;
  /** Counters that show how well writes coalesce. */
  readonly stats = { transactions: 0, operations: 0 };

  /**
   * `commitGroup` runs the operations in one transaction and answers one outcome per
   * operation, in order; a throw (the transaction could not begin or commit) fails them all.
   */
  constructor(
    private readonly commitGroup: (operations: readonly QueuedOperation[]) => OperationOutcome[],
    private readonly weightMax: number,
  ) {}

  submit<T>(operation: { run(): T; afterCommit(value: T): void; weight: number }): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.pending.push({
        run: operation.run,
        afterCommit: operation.afterCommit as (value: unknown) => void,
        weight: operation.weight,
        resolve: resolve as (value: unknown) => void,
        reject,
      });
      this.scheduleFlush();
    });
  }

  /** Commits everything queued now; used on close so no accepted write is left behind. */
  drain(): void {
    while (this.pending.length > 0) this.flushOneGroup();
  }

  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(() => {
      this.flushScheduled = false;
      this.flushOneGroup();
      if (this.pending.length > 0) this.scheduleFlush();
    });
  }

  private flushOneGroup(): void {
    let weight = 0;
    let count = 0;
    // At least one operation per group, however heavy, so an oversized one still goes through.
    while (count < this.pending.length && (count === 0 || weight + this.pending[count]!.weight <= this.weightMax)) {
      weight += this.pending[count]!.weight;
      count++;
    }
    if (count === 0) return;
    const group = this.pending.slice(0, count);
    this.pending = this.pending.slice(count);
    let outcomes: OperationOutcome[];
    try {
      outcomes = this.commitGroup(group);
    } catch (error) {
      for (const operation of group) operation.reject(error);
      return;
    }
    this.stats.transactions++;
    this.stats.operations += group.length;
    group.forEach((operation, index) => {
      const outcome = outcomes[index]!;
      if (!outcome.ok) {
        operation.reject(outcome.error);
        return;
      }
      operation.afterCommit(outcome.value);
      operation.resolve(outcome.value);
    });
  }
}
