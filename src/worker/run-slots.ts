/**
 * The runs a worker holds, from lease to acknowledged completion: held for their ready time
 * (leased ahead), waiting for a slot (prefetched, or a herd's released holds), running, or
 * completing. A leased run becomes a `RunAttempt` (heartbeats, handler, completion); this
 * hands attempts to free slots, oldest first, and tells the lease loop (`onChange`) whenever
 * a slot or a place may have freed. Its counts are the lease policy's `SlotCounts`.
 */
import type { Clock } from '../clock.js';
import { workerStartsPerTurnCountMax } from '../limits.js';
import { FifoQueue } from './fifo-queue.js';
import { InstantQueue } from './instant-queue.js';
import type { SlotCounts } from './lease-policy.js';
import { RunAttempt, type AttemptDependencies, type LeaseLostError } from './run-attempt.js';
import type { LeasedRun } from './wire.js';

export class RunSlots implements SlotCounts {
  /** Handlers running now: the slots in use. */
  running = 0;
  held = 0;
  /** Leased runs from lease to acknowledged completion (held, waiting, running or completing). */
  private readonly inFlightAttempts = new Set<RunAttempt>();
  /** Leased runs waiting for a slot, oldest first. */
  private readonly waitingAttempts = new FifoQueue<RunAttempt>();
  /** Runs leased ahead and held for their ready time, by the time they are released. */
  private readonly holds: InstantQueue<RunAttempt>;
  /** One for every attempt: an object and a closure per run were garbage the worker's scavenges paid for. */
  private readonly attemptDependencies: AttemptDependencies;
  /** Settles a wait for `inFlight` to empty. */
  private drained: (() => void) | undefined;
  /** Handlers started since the event loop last turned (`startWaiting`). */
  private startsThisTurn = 0;
  private startsDeferred = false;
  /** startWaiting() is on the stack (a handler returning at once re-enters it through its settling). */
  private startingWaiting = false;

  constructor(
    private readonly options: { concurrency: number; leaseAheadMs: number; clock: Clock; onChange: () => void },
    dependencies: Omit<AttemptDependencies, 'onHandlerSettled' | 'onAttemptDone'>,
  ) {
    this.holds = new InstantQueue<RunAttempt>(options.clock, (attempt) => this.releaseHeld(attempt));
    this.attemptDependencies = {
      ...dependencies,
      onHandlerSettled: () => {
        this.running--;
        this.startWaiting();
        this.options.onChange();
      },
      onAttemptDone: (attempt) => this.attemptDone(attempt),
    };
  }

  get waiting(): number {
    return this.waitingAttempts.length;
  }

  get inFlight(): number {
    return this.inFlightAttempts.size;
  }

  /**
   * Takes a leased run: its handler starts now if a slot is free, else when one frees; a run
   * leased ahead of its ready time waits for that time first (heartbeating meanwhile).
   * Answers whether it is held for its ready time.
   */
  accept(run: LeasedRun): boolean {
    const attempt = new RunAttempt(run, this.attemptDependencies);
    this.inFlightAttempts.add(attempt);
    // The ready time is the server's clock; the hold never exceeds leaseAheadMs, so a worker
    // whose clock lags the server's cannot sit on a run longer than it asked to.
    const { clock, leaseAheadMs } = this.options;
    const nowMs = clock.nowMs();
    const readyAtMs = leaseAheadMs === 0 || run.ready_at === undefined ? Number.NaN : Date.parse(run.ready_at);
    if (readyAtMs > nowMs) {
      attempt.keepAlive();
      this.holds.add(Math.min(readyAtMs, nowMs + leaseAheadMs), attempt);
      this.held++;
      return true;
    }
    this.waitingAttempts.push(attempt);
    this.startWaiting();
    // Still waiting for a slot: it heartbeats meanwhile (one that started arms its own).
    attempt.keepAlive();
    return false;
  }

  /** Takes every run away from its handler (a stop out of patience), and lets held runs go: their handlers never start. */
  abortAll(reason: LeaseLostError): void {
    for (const attempt of this.inFlightAttempts) attempt.abort(reason);
    void this.holds.fireAll();
  }

  /** Settles once no run is in flight (those accepted meanwhile included). */
  async whenEmpty(): Promise<void> {
    while (this.inFlightAttempts.size > 0) {
      await new Promise<void>((resolve) => {
        this.drained = resolve;
      });
    }
  }

  /** Hands a run held for its ready time to the slots (or, if aborted meanwhile, lets it go). */
  private releaseHeld(attempt: RunAttempt): void {
    this.held--;
    this.waitingAttempts.push(attempt);
    this.startWaiting();
  }

  /** The attempt's completion was answered or given up, or its run was taken away. */
  private attemptDone(attempt: RunAttempt): void {
    this.inFlightAttempts.delete(attempt);
    if (this.inFlightAttempts.size === 0) this.drained?.();
    this.options.onChange();
  }

  /**
   * Hands waiting runs to free slots, oldest first. Quick handlers free their slots at once
   * (or, if they return promises, in microtasks), so a long queue (a herd's released holds)
   * would start run after run without the event loop ever turning: no completion sent, none
   * acknowledged, every finished attempt kept alive until the last start. So at most
   * `workerStartsPerTurnCountMax` start per turn; the rest wait for the next one.
   */
  private startWaiting(): void {
    // A handler that returns at once frees its slot within execute(), which re-enters here: the loop below takes the slot.
    if (this.startingWaiting) return;
    this.startingWaiting = true;
    try {
      while (this.running < this.options.concurrency && this.waitingAttempts.length > 0) {
        if (this.startsThisTurn >= workerStartsPerTurnCountMax) {
          this.startInNextTurn();
          return;
        }
        if (this.startsThisTurn++ === 0) setImmediate(this.endTurn);
        this.running++;
        this.waitingAttempts.shift().execute();
      }
    } finally {
      this.startingWaiting = false;
    }
  }

  private startInNextTurn(): void {
    if (this.startsDeferred) return;
    this.startsDeferred = true;
    setImmediate(() => {
      this.startsDeferred = false;
      this.startWaiting();
    });
  }

  private readonly endTurn = (): void => {
    this.startsThisTurn = 0;
  };
}
