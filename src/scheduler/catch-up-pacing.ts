/**
 * Catch-up pacing: the overdue next occurrences of a `catch_up: all` backlog are wheeled at a
 * share of the node's dispatch capacity, one slot each, so that a backlog cannot starve
 * current work. The policy is pure (`catchUpSpacingMs`, `nextCatchUpSlotMs`); `CatchUpPacer`
 * holds the last slot handed out.
 */

/** Milliseconds between two paced catch-up firings: `share` of `capacityPerSecond`. */
export function catchUpSpacingMs(capacityPerSecond: number, share: number): number {
  return 1_000 / (capacityPerSecond * share);
}

/** The slot after `lastSlotMs`, never before now: a backlog idle for a while starts again at once. */
export function nextCatchUpSlotMs(lastSlotMs: number, nowMs: number, spacingMs: number): number {
  return Math.max(nowMs, lastSlotMs + spacingMs);
}

export class CatchUpPacer {
  private lastSlotMs = 0;

  constructor(private readonly spacingMs: number) {}

  /** The wheel time of the next overdue timer of a backlog. */
  nextSlotMs(nowMs: number): number {
    this.lastSlotMs = nextCatchUpSlotMs(this.lastSlotMs, nowMs, this.spacingMs);
    return this.lastSlotMs;
  }
}
