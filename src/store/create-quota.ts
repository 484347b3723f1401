/**
 * The rule both stores apply to a limited team's create (docs/API.md "Team limits"), pure:
 * each store reads the team's bucket row in the create's transaction, asks `takeCreateTokens`,
 * counts the team's pending work only when `pendingCountDue` says the count it keeps is stale,
 * asks `admitPending`, and writes the row `bucketRowAfter` answers, whatever the verdict.
 */
import { takeTokens, type BucketState } from '../domain/token-bucket.js';
import { pendingRecountIntervalMs, type CreateQuota, type QuotaCreateOutcome } from './store.js';

/** A team's bucket row (`team_buckets`), as both stores keep it. */
export interface QuotaBucketRow {
  tokens: number;
  atMs: number;
  /** The pending count at `pendingAtMs`, plus the creates let in since; null before the first count. */
  pending: number | null;
  pendingAtMs: number | null;
}

export type QuotaRefusal = Extract<QuotaCreateOutcome, { kind: 'refused' }>;

/** `create_per_s`: the bucket after taking `count` tokens (unchanged without the limit), or the refusal. */
export function takeCreateTokens(row: QuotaBucketRow | null, quota: CreateQuota, count: number, nowMs: number):
  { bucket: BucketState | null } | { refusal: QuotaRefusal } {
  const bucket = row === null ? null : { tokens: row.tokens, atMs: row.atMs };
  if (quota.createPerS === null) return { bucket };
  const take = takeTokens(bucket, quota.createPerS, count, nowMs);
  return take.admitted
    ? { bucket: take.state }
    : { refusal: { kind: 'refused', limit: 'create_per_s', retryAfterMs: take.retryAfterMs } };
}

/** Whether the team's pending work must be counted now: it has `pending_max` and no count of the last interval. */
export function pendingCountDue(row: QuotaBucketRow | null, quota: CreateQuota, nowMs: number): boolean {
  if (quota.pendingMax === null) return false;
  if (row === null || row.pending === null || row.pendingAtMs === null) return true;
  return nowMs < row.pendingAtMs || nowMs - row.pendingAtMs >= pendingRecountIntervalMs;
}

/**
 * `pending_max`: the pending count after letting `count` creates in (`counted` when the store
 * just counted, else the row's), or the refusal with the count as it stands.
 */
export function admitPending(row: QuotaBucketRow | null, quota: CreateQuota, count: number, nowMs: number,
  counted: number | null): { pending: number | null; pendingAtMs: number | null; refusal: QuotaRefusal | null } {
  if (quota.pendingMax === null) return { pending: row?.pending ?? null, pendingAtMs: row?.pendingAtMs ?? null, refusal: null };
  const pending = counted ?? row?.pending ?? 0;
  const pendingAtMs = counted === null ? row?.pendingAtMs ?? nowMs : nowMs;
  if (pending + count > quota.pendingMax) {
    return { pending, pendingAtMs, refusal: { kind: 'refused', limit: 'pending_max', retryAfterMs: pendingRecountIntervalMs, pending } };
  }
  return { pending: pending + count, pendingAtMs, refusal: null };
}

/**
 * Tokens written for a bucket never taken from: more than any bucket holds (`takeTokens` caps
 * them at its capacity), so a team whose first requests met only `pending_max`, or that had no
 * `create_per_s` yet, starts with a full bucket.
 */
export const fullBucketTokens = 1e12;

/** The row to write: the tokens as taken (or as they were, for a refusal) and the pending count. */
export function bucketRowAfter(bucket: BucketState | null, pending: { pending: number | null; pendingAtMs: number | null },
  nowMs: number): QuotaBucketRow {
  return {
    tokens: bucket?.tokens ?? fullBucketTokens, atMs: bucket?.atMs ?? nowMs, pending: pending.pending, pendingAtMs: pending.pendingAtMs,
  };
}
