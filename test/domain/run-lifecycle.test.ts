// The run lifecycle (src/domain/run-lifecycle.ts) as properties over random histories of one
// run: a model run is driven through leases, heartbeats, completions, expiry sweeps, replays
// and cancels, each applied only as the module decides, and after every step the rules of the
// state diagram are checked. The stores carry these decisions out; the conformance suite
// (test/store/) holds them to the same outcomes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  decideCancel, decideCompletion, decideExpiry, decideHeartbeat, decideReplay, expiryFinishedAtMs, expiryReadyAtMs,
  fenceHolds, finalRunStatuses, isFinalStatus, isLeasable, leaseExpiresAtMsOf, leaseMissOf, leasePasses, leasedAttemptOf,
  leasedStatus, noLowerBoundMs, readyMaxOf, isLeaseExpired,
} from '../../src/domain/run-lifecycle.js';
import { retryJitterFraction } from '../../src/limits.js';
import type { CompletionStatus, IdempotencyClass, RetrySpec, RunStatus } from '../../src/domain/types.js';
import { runStatuses } from '../../src/domain/types.js';

interface ModelRun {
  status: RunStatus;
  attempt: number;
  attemptBase: number;
  fencingToken: string | null;
  readyAtMs: number | null;
  leaseExpiresAtMs: number | null;
  leaseMs: number;
  held: boolean;
}

type Command =
  | { kind: 'lease'; advanceMs: number; aheadMs: number }
  | { kind: 'heartbeat'; advanceMs: number; stale: number | null }
  | { kind: 'complete'; advanceMs: number; status: CompletionStatus; stale: number | null; draw: number }
  | { kind: 'expire'; advanceMs: number }
  | { kind: 'replay'; advanceMs: number }
  | { kind: 'cancel'; advanceMs: number };

const retryArbitrary = fc.record({
  max_attempts: fc.integer({ min: 1, max: 8 }),
  base_s: fc.integer({ min: 1, max: 600 }),
  max_s: fc.integer({ min: 1, max: 7_200 }),
}).map((retry): RetrySpec => ({ ...retry, max_s: Math.max(retry.max_s, retry.base_s) }));

const advanceArbitrary = fc.integer({ min: 0, max: 120_000 });
/** null: the current token; a number: a token that is not the current one (an older one, or one never issued). */
const staleArbitrary = fc.option(fc.integer({ min: 0, max: 50 }), { freq: 2 });
const drawArbitrary = fc.double({ min: 0, max: 1, noNaN: true });

const commandArbitrary: fc.Arbitrary<Command> = fc.oneof(
  fc.record({ kind: fc.constant('lease' as const), advanceMs: advanceArbitrary, aheadMs: fc.integer({ min: 0, max: 10_000 }) }),
  fc.record({ kind: fc.constant('heartbeat' as const), advanceMs: advanceArbitrary, stale: staleArbitrary }),
  fc.record({
    kind: fc.constant('complete' as const), advanceMs: advanceArbitrary,
    status: fc.constantFrom<CompletionStatus>('succeeded', 'failed', 'failed', 'failed_permanent'), stale: staleArbitrary,
    draw: drawArbitrary,
  }),
  fc.record({ kind: fc.constant('expire' as const), advanceMs: advanceArbitrary }),
  fc.record({ kind: fc.constant('replay' as const), advanceMs: advanceArbitrary }),
  fc.record({ kind: fc.constant('cancel' as const), advanceMs: fc.constant(0) }),
);

/** The delay bounds of a retry after `attemptsUsed` attempts (API.md "Runs"). */
function retryBoundsMs(retry: RetrySpec, attemptsUsed: number): [number, number] {
  const baseS = Math.min(retry.base_s * 2 ** Math.min(attemptsUsed - 1, 62), retry.max_s);
  return [Math.round(baseS * (1 - retryJitterFraction) * 1000), Math.round(baseS * (1 + retryJitterFraction) * 1000)];
}

/** One history: applies each command as the module decides and checks the diagram's rules after each. */
function runHistory(retry: RetrySpec, idempotency: IdempotencyClass, commands: readonly Command[]): void {
  let nowMs = 1_000_000;
  let tokensIssued = 0;
  let run: ModelRun = {
    status: 'ready', attempt: 0, attemptBase: 0, fencingToken: null, readyAtMs: nowMs, leaseExpiresAtMs: null,
    leaseMs: 30_000, held: false,
  };
  const tokenFor = (stale: number | null): string => {
    if (stale === null) return run.fencingToken ?? 'none';
    const candidate = String(stale);
    return candidate === run.fencingToken ? String(tokensIssued + 1_000) : candidate;
  };
  for (const command of commands) {
    nowMs += command.advanceMs;
    const before = run;
    run = step(run, command);
    check(before, run, command);
  }

  function step(current: ModelRun, command: Command): ModelRun {
    switch (command.kind) {
      case 'lease': {
        if (!isLeasable(current.status, current.held, current.readyAtMs, nowMs + command.aheadMs)) return current;
        tokensIssued++;
        return {
          ...current, status: leasedStatus, attempt: leasedAttemptOf(current.attempt), fencingToken: String(tokensIssued),
          leaseExpiresAtMs: leaseExpiresAtMsOf(nowMs, current.readyAtMs!, current.leaseMs), readyAtMs: null,
        };
      }
      case 'heartbeat': {
        const outcome = decideHeartbeat(current, tokenFor(command.stale), nowMs);
        if (command.stale !== null || current.status !== leasedStatus) {
          assert.notEqual(outcome.kind, 'extended', 'a stale token extends nothing');
        }
        return outcome.kind === 'extended' ? { ...current, leaseExpiresAtMs: outcome.leaseExpiresAtMs } : current;
      }
      case 'complete': {
        const token = tokenFor(command.stale);
        if (!fenceHolds(current.status, current.fencingToken, token)) {
          assert.ok(command.stale !== null || current.status !== leasedStatus, 'the current token of a running run holds');
          const miss = leaseMissOf(current);
          assert.equal(miss.kind, current.status === 'cancelled' ? 'cancelled' : 'stale_token');
          return current;
        }
        assert.equal(command.stale, null, 'a stale token never passes the fence');
        const attemptsUsed = current.attempt - current.attemptBase;
        const change = decideCompletion({ status: command.status, error: 'boom', nowMs }, attemptsUsed, retry,
          () => command.draw);
        if (change.status === 'retry_wait') {
          const [lowMs, highMs] = retryBoundsMs(retry, attemptsUsed);
          const delayMs = change.readyAtMs - nowMs;
          assert.ok(delayMs >= lowMs && delayMs <= highMs, `retry delay ${delayMs} within [${lowMs}, ${highMs}]`);
          assert.equal(command.status, 'failed');
          assert.ok(attemptsUsed < retry.max_attempts);
        }
        if (change.status === 'dead') assert.ok(command.status === 'failed_permanent' || attemptsUsed >= retry.max_attempts);
        return { ...current, status: change.status, readyAtMs: change.readyAtMs, leaseExpiresAtMs: null };
      }
      case 'expire': {
        if (current.status !== leasedStatus || !isLeaseExpired(current.leaseExpiresAtMs!, nowMs)) return current;
        const toStatus = decideExpiry(idempotency, retry, current.attempt - current.attemptBase);
        assert.notEqual(toStatus, leasedStatus, 'expiry never yields running');
        if (idempotency === 'unsafe') assert.equal(toStatus, 'abandoned');
        assert.equal(expiryReadyAtMs(toStatus, nowMs) === null, expiryFinishedAtMs(toStatus, nowMs) !== null);
        return { ...current, status: toStatus, readyAtMs: expiryReadyAtMs(toStatus, nowMs), leaseExpiresAtMs: null };
      }
      case 'replay': {
        const decided = decideReplay(current, nowMs);
        if (decided.kind === 'invalid_state') return current;
        return { ...current, status: decided.toStatus, attemptBase: decided.attemptBase, readyAtMs: decided.readyAtMs };
      }
      case 'cancel': {
        const toStatus = decideCancel(current.status);
        return toStatus === null ? current : { ...current, status: toStatus, readyAtMs: null, leaseExpiresAtMs: null };
      }
    }
  }

  function check(before: ModelRun, after: ModelRun, command: Command): void {
    if (isFinalStatus(before.status) && after.status !== before.status) {
      assert.equal(command.kind, 'replay', `only replay leaves a final status (${before.status} -> ${after.status})`);
      assert.equal(before.status, 'dead', 'only dead is replayed');
      assert.equal(after.status, 'ready');
    }
    const isStale = (command.kind === 'heartbeat' || command.kind === 'complete') && command.stale !== null;
    if (isStale) assert.deepEqual(after, before, 'a stale token changes nothing');
    assert.ok(after.attempt - after.attemptBase <= retry.max_attempts,
      `attempts ${after.attempt - after.attemptBase} within max ${retry.max_attempts}`);
    if (after.status === leasedStatus) assert.ok(after.fencingToken !== null && after.leaseExpiresAtMs !== null);
    if (after.status === 'ready' || after.status === 'retry_wait') assert.ok(after.readyAtMs !== null);
  }
}

void test('every history of a run keeps to the state diagram', () => {
  fc.assert(fc.property(
    retryArbitrary, fc.constantFrom<IdempotencyClass>('keyed', 'keyed', 'unsafe'), fc.array(commandArbitrary, { maxLength: 60 }),
    (retry, idempotency, commands) => runHistory(retry, idempotency, commands),
  ), { numRuns: 3_000 });
});

void test('a retry waits longer the more attempts failed, for one draw, within the policy\'s bounds', () => {
  fc.assert(fc.property(retryArbitrary, fc.integer({ min: 1, max: 20 }), fc.integer({ min: 1, max: 20 }), drawArbitrary,
    fc.integer({ min: 0, max: 2 ** 40 }), (retry, first, second, draw, nowMs) => {
      const wide: RetrySpec = { ...retry, max_attempts: 21 };
      const [fewer, more] = first <= second ? [first, second] : [second, first];
      const readyAt = (attemptsUsed: number): number => {
        const change = decideCompletion({ status: 'failed', error: null, nowMs }, attemptsUsed, wide, () => draw);
        assert.equal(change.status, 'retry_wait');
        return change.readyAtMs!;
      };
      assert.ok(readyAt(fewer) <= readyAt(more));
      const delayMs = readyAt(more) - nowMs;
      assert.ok(delayMs >= Math.round(retry.base_s * (1 - retryJitterFraction) * 1000) - 1);
      assert.ok(delayMs <= Math.round(retry.max_s * (1 + retryJitterFraction) * 1000));
    }));
});

void test('the draw is taken only for a retry', () => {
  const retry: RetrySpec = { max_attempts: 2, base_s: 1, max_s: 10 };
  const never = (): number => assert.fail('no draw for an outcome without a retry');
  assert.equal(decideCompletion({ status: 'succeeded', error: null, nowMs: 0 }, 1, undefined, never).status, 'succeeded');
  assert.equal(decideCompletion({ status: 'failed_permanent', error: 'x', nowMs: 0 }, 1, retry, never).status, 'dead');
  assert.equal(decideCompletion({ status: 'failed', error: 'x', nowMs: 0 }, 2, retry, never).status, 'dead');
  assert.equal(decideCompletion({ status: 'failed', error: 'x', nowMs: 0 }, 1, retry, () => 0.5).status, 'retry_wait');
});

void test('only a leasable status is leased, and no transition but replay leaves a final one', () => {
  for (const status of runStatuses) {
    const leasable = isLeasable(status, false, 0, 0);
    assert.equal(leasable, status === 'ready' || status === 'retry_wait', status);
    assert.equal(isLeasable(status, true, 0, 0), false, 'a held run is not leasable');
    assert.equal(isFinalStatus(status), finalRunStatuses.includes(status), status);
    if (isFinalStatus(status)) assert.equal(decideCancel(status), null, `${status} is not cancelled`);
    const replay = decideReplay({ status, attempt: 3 }, 5);
    assert.equal(replay.kind, status === 'dead' ? 'replay' : 'invalid_state', status);
  }
  assert.equal(isLeasable('ready', false, 11, 10), false, 'not before its ready time');
  assert.equal(isLeasable('ready', false, null, 10), false);
});

void test('a lease\'s passes stay within max, readyMax and the look-ahead, in order', () => {
  fc.assert(fc.property(
    fc.integer({ min: -2, max: 100 }), fc.option(fc.integer({ min: -2, max: 120 })), fc.option(fc.integer({ min: 0, max: 10_000 })),
    fc.integer({ min: 0, max: 2 ** 40 }), (max, readyMax, aheadMs, nowMs) => {
      const request = { max, readyMax: readyMax ?? undefined, aheadMs: aheadMs ?? undefined, nowMs };
      const passes = leasePasses(request);
      if (max <= 0) assert.deepEqual(passes, []);
      let previousUntilMs = noLowerBoundMs;
      let previousCount = 0;
      for (const pass of passes) {
        assert.ok(pass.afterMs >= previousUntilMs, 'passes do not overlap');
        assert.ok(pass.afterMs < pass.untilMs);
        assert.ok(pass.untilMs <= nowMs + (aheadMs ?? 0), 'within the look-ahead');
        assert.ok(pass.upToCount > previousCount && pass.upToCount <= max, 'counts grow to max at most');
        if (pass.untilMs > nowMs || pass.afterMs >= nowMs) {
          // A pass reaching past now is the whole lease, or the ahead part after readyMax.
          assert.ok(readyMaxOf(request) >= max || pass.afterMs === nowMs);
        } else {
          assert.ok(pass.upToCount <= readyMaxOf(request), 'ready now: at most readyMax');
        }
        previousUntilMs = pass.untilMs;
        previousCount = pass.upToCount;
      }
      assert.ok(passes.length <= 2);
    }));
});

void test('a heartbeat extends only the running attempt\'s lease, from now', () => {
  const run = { status: 'running' as RunStatus, fencingToken: '7', leaseMs: 30_000 };
  assert.deepEqual(decideHeartbeat(run, '7', 100), { kind: 'extended', leaseExpiresAtMs: 30_100 });
  assert.deepEqual(decideHeartbeat(run, '6', 100), { kind: 'stale_token' });
  assert.deepEqual(decideHeartbeat({ ...run, status: 'cancelled' }, '7', 100), { kind: 'cancelled' });
  assert.deepEqual(decideHeartbeat({ ...run, status: 'succeeded' }, '7', 100), { kind: 'stale_token' });
  assert.deepEqual(decideHeartbeat(undefined, '7', 100), { kind: 'not_found' });
  assert.equal(leaseExpiresAtMsOf(100, 5_000, 1_000), 6_000, 'a lease ahead runs from its ready time');
  assert.equal(leaseExpiresAtMsOf(100, 50, 1_000), 1_100);
});
