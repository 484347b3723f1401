/**
 * Group commit: calls that arrive in the same event-loop turn share one transaction, so one
 * fsync serves them all (DESIGN.md "Storage"). better-sqlite3 commits synchronously, which
 * blocks the loop; requests that arrive meanwhile queue up in the kernel and are read in
 * the next turn, so a busy server naturally hands the next flush a bigger group.
 *
 * A group is bounded by `weightMax` (items, not calls) so one flush never holds the loop for
 * long; the rest waits for the next turn, letting other I/O run in between.
 */
export type CallOutcome<O> = { ok: true; value: O } | { ok: false; error: unknown };

interface PendingCall<I, O> {
  input: I;
  weight: number;
  resolve: (value: O) => void;
  reject: (error: unknown) => void;
}

export class GroupCommitQueue<I, O> {
  private pending: PendingCall<I, O>[] = [];
  private flushScheduled = false;

  /**
   * `commitGroup` runs one transaction for the inputs and answers one outcome per input, in
   * order; a throw fails the whole group.
   */
  constructor(
    private readonly commitGroup: (inputs: I[]) => CallOutcome<O>[],
    private readonly weightMax: number,
  ) {}

  submit(input: I, weight: number): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.pending.push({ input, weight, resolve, reject });
      this.scheduleFlush();
    });
  }

  /** Commits everything queued now; used on close so no accepted call is left behind. */
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
    // At least one call per group, however heavy, so an oversized call still goes through.
    while (count < this.pending.length && (count === 0 || weight + this.pending[count]!.weight <= this.weightMax)) {
      weight += this.pending[count]!.weight;
      count++;
    }
    const group = this.pending.slice(0, count);
    this.pending = this.pending.slice(count);
    if (group.length === 0) return;
    let outcomes: CallOutcome<O>[];
    try {
      outcomes = this.commitGroup(group.map((call) => call.input));
    } catch (error) {
      for (const call of group) call.reject(error);
      return;
    }
    group.forEach((call, index) => {
      const outcome = outcomes[index]!;
      if (outcome.ok) call.resolve(outcome.value);
      else call.reject(outcome.error);
    });
  }
}
