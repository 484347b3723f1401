/**
 * How many runs a worker asks for, when, and in how many requests: the lease loop's decisions
 * (lease-loop.ts), pure. It reads what the slots hold (`SlotCounts`) and the clocks it is
 * given, and remembers only what its own requests did: what they asked for, whether the last
 * found the pool drained or the hold window full, and the backoff after failures.
 *
 * - Slot leases ask for the free slots and prefetch places, less what requests in flight
 *   asked for. While the pool is drained up to `longPolls` of them stay parked at once,
 *   splitting the free slots; while leases come back full, one asks for every free slot.
 * - With fewer than a quarter of the slots free and some handler running or some run held,
 *   a slot lease lingers up to `leaseLingerMs` (real time) for more to free, so a worker
 *   whose handlers end one at a time leases a batch per request.
 * - Hold leases (`holdAheadMax`) ask for the free hold places, one at a time (`longPolls`
 *   while they come back full); after one that came back short the next waits
 *   `holdLingerMs` (on the clock).
 * - After a failed request no lease goes out before the backoff ends (on the clock).
 * - Completions not yet acknowledged beyond `workerUnacknowledgedCompletionsPerSlotCount` per
 *   slot hold slots, which bounds the runs a worker holds when the server is slow to accept them.
 */
import { leaseBatchMax, workerUnacknowledgedCompletionsPerSlotCount } from '../limits.js';
import { leaseErrorBackoffMs } from './lease-errors.js';
import type { WorkerSettings } from './worker-options.js';

/** What the worker's slots hold now (run-slots.ts). */
export interface SlotCounts {
  /** Handlers running: the slots in use. */
  running: number;
  /** Leased runs waiting for a slot. */
  waiting: number;
  /** Runs leased ahead and held for their ready time. */
  held: number;
  /** Leased runs not yet done: held, waiting, running, or completing (completion not yet acknowledged). */
  inFlight: number;
}

/** What the lease loop does next. */
export type LeaseStep =
  /** Send a slot lease for up to `max` runs. */
  | { kind: 'lease'; max: number }
  /** Send a hold lease for up to `places` runs ahead. */
  | { kind: 'lease-holds'; places: number }
  /** Wait until woken (a slot frees, a request settles, a stop) or `forMs` passes on the clock or in real time. */
  | { kind: 'wait'; forMs: number | undefined; time: 'clock' | 'real' };

export type LeasePolicySettings = Pick<WorkerSettings,
  'concurrency' | 'prefetch' | 'longPolls' | 'leaseLingerMs' | 'holdAheadMax' | 'holdLingerMs'>;

export class LeasePolicy {
  /** Below this many free slots (a quarter of slots and prefetch places) a slot lease lingers. */
  private readonly refillSlots: number;
  /** Slots and prefetch places asked for by slot leases in flight. */
  private slotsAsked = 0;
  private slotLeases = 0;
  /** Hold places asked for by hold leases in flight. */
  private holdsAsked = 0;
  private holdLeases = 0;
  /** The last slot lease answered with fewer runs than it asked for (the pool had no more), or none has yet. */
  private poolDrained = true;
  /** The last hold lease filled every place it asked for: the window may hold more. */
  private takingHolds = false;
  /** After a hold lease came back short, no other before this (on the clock). */
  private holdsResumeAtMs = Number.NEGATIVE_INFINITY;
  /** When the current linger for more free slots ends (real time), while one lasts. */
  private lingerEndMs: number | undefined;
  private consecutiveErrors = 0;
  /** After a failed lease, no request before this (on the clock). */
  private backoffEndMs = Number.NEGATIVE_INFINITY;

  constructor(private readonly settings: LeasePolicySettings) {
    this.refillSlots = Math.ceil((settings.concurrency + settings.prefetch) / 4);
  }

  /** Lease requests in flight, slot and hold leases together. */
  get leasesInFlight(): number {
    return this.slotLeases + this.holdLeases;
  }

  /** The next step at `nowMs` (the clock) and `realNowMs` (`performance.now()`), for slots holding `counts`. */
  next(nowMs: number, realNowMs: number, counts: SlotCounts): LeaseStep {
    const backoffMs = this.backoffEndMs - nowMs;
    if (backoffMs > 0) return { kind: 'wait', forMs: backoffMs, time: 'clock' };
    const holdPlaces = this.holdLeaseDue(nowMs, counts);
    if (holdPlaces > 0) return { kind: 'lease-holds', places: holdPlaces };
    const freeSlots = Math.min(this.freeSlotCount(counts) - this.slotsAsked, leaseBatchMax);
    // A second long-poll only while the pool is drained: in throughput mode one request asks
    // for every free slot, as one batch.
    const pollsAllowed = this.poolDrained ? this.settings.longPolls : 1;
    if (freeSlots <= 0 || this.slotLeases >= pollsAllowed) {
      return { kind: 'wait', forMs: this.holdLingerLeftMs(nowMs, counts), time: 'clock' };
    }
    if (freeSlots < this.refillSlots && counts.running + counts.held > 0 && this.settings.leaseLingerMs > 0) {
      this.lingerEndMs ??= realNowMs + this.settings.leaseLingerMs;
      const remainingMs = this.lingerEndMs - realNowMs;
      if (remainingMs > 0) return { kind: 'wait', forMs: remainingMs, time: 'real' };
    }
    this.lingerEndMs = undefined;
    // The first of several parked polls takes its share, so the next has slots to ask for.
    return { kind: 'lease', max: Math.ceil(freeSlots / (pollsAllowed - this.slotLeases)) };
  }

  /**
   * Runs the worker may lease now: slots and prefetch places not taken by a running, waiting
   * or held run, less any excess of unacknowledged completions.
   */
  freeSlotCount(counts: SlotCounts): number {
    const { concurrency, prefetch, holdAheadMax } = this.settings;
    const queuedCount = counts.running + counts.waiting + Math.max(0, counts.held - holdAheadMax);
    const completingCount = counts.inFlight - counts.running - counts.waiting - counts.held;
    return concurrency + prefetch - queuedCount -
      Math.max(0, completingCount - workerUnacknowledgedCompletionsPerSlotCount * concurrency);
  }

  /** Hold places (`holdAheadMax`) neither taken by a held run nor asked for. */
  freeHoldCount(counts: SlotCounts): number {
    const { holdAheadMax } = this.settings;
    return Math.max(0, holdAheadMax - Math.min(counts.held, holdAheadMax) - this.holdsAsked);
  }

  slotLeaseSent(max: number): void {
    this.slotsAsked += max;
    this.slotLeases++;
  }

  /** A slot lease for `max` runs was answered with `runCount`. */
  slotLeaseAnswered(max: number, runCount: number): void {
    this.poolDrained = runCount < max;
  }

  /** A slot lease settled, answered or not. */
  slotLeaseSettled(max: number): void {
    this.slotsAsked -= max;
    this.slotLeases--;
  }

  holdLeaseSent(places: number): void {
    this.holdsAsked += places;
    this.holdLeases++;
  }

  /** A hold lease for `places` was answered at `nowMs` with `heldCount` runs held for their ready time. */
  holdLeaseAnswered(places: number, heldCount: number, nowMs: number): void {
    this.takingHolds = heldCount >= places;
    if (!this.takingHolds) this.holdsResumeAtMs = nowMs + this.settings.holdLingerMs;
  }

  holdLeaseSettled(places: number): void {
    this.holdsAsked -= places;
    this.holdLeases--;
  }

  leaseSucceeded(): void {
    this.consecutiveErrors = 0;
  }

  /**
   * A lease failed at `nowMs` and may heal: no lease goes out before the backoff ends
   * (leaseErrorBackoffMs). Answers the backoff and the failures in a row.
   */
  leaseFailed(nowMs: number, random: () => number, retryAfterS: number | undefined, refused: boolean):
    { delayMs: number; consecutiveErrors: number } {
    this.consecutiveErrors += 1;
    const delayMs = leaseErrorBackoffMs(this.consecutiveErrors, random, retryAfterS, refused);
    this.backoffEndMs = Math.max(this.backoffEndMs, nowMs + delayMs);
    return { delayMs, consecutiveErrors: this.consecutiveErrors };
  }

  /**
   * The places a hold lease should ask for now, or 0: places are free, the linger after a
   * short one is over, and fewer are in flight than allowed (one; `longPolls` while answers
   * come back full, so the server leases a herd while the worker reads the last answer).
   */
  private holdLeaseDue(nowMs: number, counts: SlotCounts): number {
    if (this.settings.holdAheadMax === 0 || nowMs < this.holdsResumeAtMs) return 0;
    const holdsAllowed = this.takingHolds ? this.settings.longPolls : 1;
    const places = Math.min(this.freeHoldCount(counts), leaseBatchMax - 1);
    if (places <= 0 || this.holdLeases >= holdsAllowed) return 0;
    return Math.ceil(places / (holdsAllowed - this.holdLeases));
  }

  /** How long until a hold lease may go again, if one is wanted and only the linger holds it back. */
  private holdLingerLeftMs(nowMs: number, counts: SlotCounts): number | undefined {
    if (this.settings.holdAheadMax === 0 || this.holdLeases > 0 || this.freeHoldCount(counts) <= 0) return undefined;
    const leftMs = this.holdsResumeAtMs - nowMs;
    return leftMs > 0 ? leftMs : undefined;
  }
}
