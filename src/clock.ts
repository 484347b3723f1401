/**
 * Time, injected. Only SystemClock reads the real clock; everything else in tickler asks a
 * Clock (DESIGN.md invariant 8). VirtualClock stands still until a test (or `POST
 * /v1/clock/advance`) moves it, and then runs every timer that comes due, in order, awaiting
 * each callback, so "advance one hour" means "everything due in that hour has happened".
 */

export interface TimerHandle {
  cancel(): void;
}

export type TimerCallback = () => void | Promise<void>;

export interface Clock {
  /** Wall time in epoch milliseconds (virtual in virtual mode). */
  nowMs(): number;
  /** Monotonic milliseconds for lease self-checks; never mixed with nowMs. */
  monotonicMs(): number;
  /** Runs `callback` once `nowMs() >= atMs`. */
  setTimer(atMs: number, callback: TimerCallback): TimerHandle;
  readonly isVirtual: boolean;
  /**
   * Where the clock is known to be going without stopping on the way: the target of a
   * virtual advance in progress. Null (or absent) when nobody knows, as with real time.
   * A scheduler may wait for later timers up to there and fire them together, without an
   * advance ever ending before a timer due within it has fired.
   */
  advancingToMs?(): number | null;
}

/** setTimeout's delay is a signed 32-bit number of milliseconds; longer waits are re-armed. */
const timeoutDelayMsMax = 2_147_483_647;

export class SystemClock implements Clock {
  readonly isVirtual = false;

  nowMs(): number {
    return Date.now();
  }

  monotonicMs(): number {
    return performance.now();
  }

  setTimer(atMs: number, callback: TimerCallback): TimerHandle {
    let handle: NodeJS.Timeout | undefined;
    let cancelled = false;
    const arm = (): void => {
      const delayMs = atMs - Date.now();
      if (delayMs > timeoutDelayMsMax) {
        handle = setTimeout(arm, timeoutDelayMsMax);
        return;
      }
      handle = setTimeout(() => {
        if (cancelled) return;
        // Node's timers may run up to a millisecond before Date.now() reaches atMs (they keep
        // their own monotonic time): never before its time (a run leased ahead starts here).
        if (Date.now() < atMs) arm();
        else void runCallback(callback);
      }, Math.max(0, delayMs));
    };
    arm();
    return {
      cancel: () => {
        cancelled = true;
        if (handle !== undefined) clearTimeout(handle);
      },
    };
  }
}

interface VirtualTimer {
  atMs: number;
  sequence: number;
  callback: TimerCallback;
  cancelled: boolean;
}

/**
 * A clock that moves only when told. Timers are kept in a binary heap ordered by (atMs,
 * sequence) so that timers due at the same instant run in the order they were set.
 */
export class VirtualClock implements Clock {
  readonly isVirtual = true;
  private currentMs: number;
  private readonly heap: VirtualTimer[] = [];
  private sequence = 0;
  private advancing: Promise<void> = Promise.resolve();
  private advanceTargetMs: number | null = null;

  constructor(startMs: number) {
    this.currentMs = startMs;
  }

  nowMs(): number {
    return this.currentMs;
  }

  monotonicMs(): number {
    return this.currentMs;
  }

  setTimer(atMs: number, callback: TimerCallback): TimerHandle {
    const timer: VirtualTimer = { atMs, sequence: this.sequence++, callback, cancelled: false };
    this.push(timer);
    if (atMs <= this.currentMs) {
      // Due already: run it soon, as a real clock would, without waiting for an advance.
      setImmediate(() => {
        void this.runDueNow();
      });
    }
    return {
      cancel: () => {
        timer.cancelled = true;
      },
    };
  }

  /**
   * Moves time forward by `durationMs`, running every timer due on the way at its own
   * instant and awaiting it. Concurrent advances are serialised.
   */
  advance(durationMs: number): Promise<number> {
    if (!Number.isFinite(durationMs) || durationMs < 0) {
      throw new RangeError(`advance needs a finite, non-negative duration, got ${durationMs}`);
    }
    const run = this.advancing.then(async () => {
      const targetMs = this.currentMs + durationMs;
      this.advanceTargetMs = targetMs;
      try {
        for (;;) {
          const next = this.peek();
          if (next === undefined || next.atMs > targetMs) break;
          this.pop();
          if (next.cancelled) continue;
          this.currentMs = Math.max(this.currentMs, next.atMs);
          await runCallback(next.callback);
          await settle();
        }
        this.currentMs = targetMs;
        await settle();
      } finally {
        this.advanceTargetMs = null;
      }
    });
    this.advancing = run.catch(() => undefined);
    return run.then(() => this.currentMs);
  }

  advancingToMs(): number | null {
    return this.advanceTargetMs;
  }

  /** Number of live timers; used by tests to see that components clean up. */
  pendingTimerCount(): number {
    return this.heap.filter((timer) => !timer.cancelled).length;
  }

  private async runDueNow(): Promise<void> {
    await this.advance(0);
  }

  private push(timer: VirtualTimer): void {
    const heap = this.heap;
    heap.push(timer);
    let index = heap.length - 1;
    while (index > 0) {
      const parent = (index - 1) >> 1;
      if (!before(heap[index]!, heap[parent]!)) break;
      [heap[index], heap[parent]] = [heap[parent]!, heap[index]!];
      index = parent;
    }
  }

  private peek(): VirtualTimer | undefined {
    return this.heap[0];
  }

  private pop(): VirtualTimer | undefined {
    const heap = this.heap;
    const top = heap[0];
    const last = heap.pop();
    if (heap.length > 0 && last !== undefined) {
      heap[0] = last;
      let index = 0;
      for (;;) {
        const left = index * 2 + 1;
        const right = left + 1;
        let smallest = index;
        if (left < heap.length && before(heap[left]!, heap[smallest]!)) smallest = left;
        if (right < heap.length && before(heap[right]!, heap[smallest]!)) smallest = right;
        if (smallest === index) break;
        [heap[index], heap[smallest]] = [heap[smallest]!, heap[index]!];
        index = smallest;
      }
    }
    return top;
  }
}

function before(a: VirtualTimer, b: VirtualTimer): boolean {
  return a.atMs < b.atMs || (a.atMs === b.atMs && a.sequence < b.sequence);
}

async function runCallback(callback: TimerCallback): Promise<void> {
  try {
    await callback();
  } catch (error) {
    // A timer callback owns its errors; one that escapes is a programmer error worth seeing.
    process.emitWarning(new Error('clock timer callback threw', { cause: error }));
  }
}

/** Lets already-queued I/O callbacks and promise chains run before time moves on. */
async function settle(): Promise<void> {
  for (let round = 0; round < 3; round++) {
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
}
