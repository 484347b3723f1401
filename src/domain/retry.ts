/**
 * Retry backoff (API.md "Runs"): after attempt n fails, attempt n + 1 is ready after
 * min(base_s × 2^(n−1), max_s) × uniform(0.8, 1.2). The caller passes the uniform draw so
 * that this stays a pure function and tests can pin it.
 */
import assert from 'node:assert/strict';
import type { RetrySpec } from './types.js';
import { retryJitterFraction } from './limits.js';

export function retryDelayMs(retry: RetrySpec, failedAttempt: number, uniform01: number): number {
  assert.ok(Number.isInteger(failedAttempt) && failedAttempt >= 1, 'attempts count from 1');
  assert.ok(uniform01 >= 0 && uniform01 <= 1, 'uniform01 is a draw from [0, 1]');
  const exponent = Math.min(failedAttempt - 1, 62);
  const baseDelayS = Math.min(retry.base_s * 2 ** exponent, retry.max_s);
  const jitterFactor = 1 - retryJitterFraction + 2 * retryJitterFraction * uniform01;
  return Math.round(baseDelayS * jitterFactor * 1000);
}

/** True when another attempt is allowed after `attemptsUsed` attempts. */
export function hasAttemptsLeft(retry: RetrySpec, attemptsUsed: number): boolean {
  return attemptsUsed < retry.max_attempts;
}
