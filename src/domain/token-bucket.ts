/**
 * The token bucket behind a team's `create_per_s` (docs/API.md, "Team limits"): pure, so both
 * stores apply the same rule to the bucket row they keep per team, inside the create's own
 * transaction. The bucket holds at most one second of tokens (at least one token). A request
 * of `count` creates is let in when the bucket holds `min(count, capacity)` tokens and then
 * takes all `count`, leaving the bucket in debt: a batch bigger than a second's worth is not
 * refused for ever, and the rate over time stays `ratePerS` all the same.
 */

export interface BucketState {
  tokens: number;
  /** When `tokens` was counted (epoch ms). */
  atMs: number;
}

export type BucketTake =
  | { admitted: true; state: BucketState }
  | { admitted: false; retryAfterMs: number };

/** Tokens a bucket of this rate holds at most: one second's worth, and never less than one. */
export function bucketCapacity(ratePerS: number): number {
  return Math.max(1, ratePerS);
}

/**
 * Takes `count` tokens from `state` (null: a bucket never used, full) at `nowMs`. A clock
 * behind the bucket's (another node's, a little ahead) refills nothing and never moves the
 * bucket's time back.
 */
export function takeTokens(state: BucketState | null, ratePerS: number, count: number, nowMs: number): BucketTake {
  const capacity = bucketCapacity(ratePerS);
  const elapsedMs = state === null ? 0 : Math.max(0, nowMs - state.atMs);
  const tokens = state === null ? capacity : Math.min(capacity, state.tokens + (elapsedMs * ratePerS) / 1000);
  const atMs = Math.max(nowMs, state?.atMs ?? nowMs);
  const needed = Math.min(count, capacity);
  // A hair of tolerance: refills are fractions, and 0.1 * 3 is not 0.3.
  if (tokens + 1e-9 >= needed) return { admitted: true, state: { tokens: tokens - count, atMs } };
  return { admitted: false, retryAfterMs: Math.ceil(((needed - tokens) * 1000) / ratePerS) };
}
