/**
 * The limits the pure domain decides with. src/limits.ts re-exports them beside every other
 * limit and default (STYLE.md §8), so the domain imports nothing outside itself.
 */

export const shardCount = 1024;
export const bucketDurationMs = 60_000;
export const cronLengthMax = 1_024;
/** A cron expression with no occurrence within this horizon is rejected (`0 0 30 2 *`). */
export const scheduleLookaheadYears = 5;
export const retryJitterFraction = 0.2;
/** A catch-up writes at most this many skipped rows and summarises the rest (API.md). */
export const catchUpSkippedRowsMax = 100;
