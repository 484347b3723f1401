// The lease policy (src/worker/lease-policy.ts) alone: what a worker asks for, when, and in how
// many requests, given what its slots hold. Pure, so every decision is checked step by step.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { leaseBatchMax, workerUnacknowledgedCompletionsPerSlotCount } from '../../src/limits.js';
import { LeasePolicy, type LeasePolicySettings, type SlotCounts } from '../../src/worker/lease-policy.js';
import { workerSettingsOf } from '../../src/worker/worker-options.js';

const idle: SlotCounts = { running: 0, waiting: 0, held: 0, inFlight: 0 };

function policyOf(overrides: Partial<LeasePolicySettings> = {}): LeasePolicy {
  return new LeasePolicy({ concurrency: 8, prefetch: 0, longPolls: 2, leaseLingerMs: 5, holdAheadMax: 0, holdLingerMs: 0,
    ...overrides });
}

void describe('slot leases', () => {
  test('an idle worker splits its free slots over the parked long-polls while the pool is drained', () => {
    const policy = policyOf();
    assert.deepEqual(policy.next(0, 0, idle), { kind: 'lease', max: 4 }, 'the first of two polls takes its share');
    policy.slotLeaseSent(4);
    assert.deepEqual(policy.next(0, 0, idle), { kind: 'lease', max: 4 });
    policy.slotLeaseSent(4);
    assert.deepEqual(policy.next(0, 0, idle), { kind: 'wait', forMs: undefined, time: 'clock' }, 'every slot is asked for');
  });

  test('once a lease comes back full, one request at a time asks for every free slot', () => {
    const policy = policyOf();
    policy.slotLeaseSent(4);
    policy.slotLeaseAnswered(4, 4);
    assert.deepEqual(policy.next(0, 0, { running: 4, waiting: 0, held: 0, inFlight: 4 }),
      { kind: 'wait', forMs: undefined, time: 'clock' }, 'one poll in flight is all that is allowed');
    policy.slotLeaseSettled(4);
    assert.deepEqual(policy.next(0, 0, { running: 0, waiting: 0, held: 0, inFlight: 0 }), { kind: 'lease', max: 8 });
  });

  test('never asks for more than a lease may carry', () => {
    const policy = policyOf({ concurrency: 900, prefetch: 900, longPolls: 1 });
    assert.deepEqual(policy.next(0, 0, idle), { kind: 'lease', max: leaseBatchMax });
  });

  test('with few slots free and a handler running it lingers in real time, then asks for what freed', () => {
    const policy = policyOf({ leaseLingerMs: 5 });
    const busy = { running: 7, waiting: 0, held: 0, inFlight: 7 };
    assert.deepEqual(policy.next(0, 1_000, busy), { kind: 'wait', forMs: 5, time: 'real' });
    assert.deepEqual(policy.next(0, 1_003, busy), { kind: 'wait', forMs: 2, time: 'real' }, 'the linger is counted from its start');
    assert.deepEqual(policy.next(0, 1_005, busy), { kind: 'lease', max: 1 });
    assert.deepEqual(policy.next(0, 1_006, busy), { kind: 'wait', forMs: 5, time: 'real' }, 'a lease sent ends the linger');
  });

  test('does not linger when nothing runs, when enough slots are free, or with leaseLingerMs 0', () => {
    assert.equal(policyOf().next(0, 0, { running: 0, waiting: 0, held: 0, inFlight: 7 }).kind, 'lease');
    assert.equal(policyOf().next(0, 0, { running: 4, waiting: 0, held: 0, inFlight: 4 }).kind, 'lease');
    assert.equal(policyOf({ leaseLingerMs: 0 }).next(0, 0, { running: 7, waiting: 0, held: 0, inFlight: 7 }).kind, 'lease');
  });

  test('unacknowledged completions beyond their allowance per slot hold slots', () => {
    const policy = policyOf({ concurrency: 2 });
    const allowance = workerUnacknowledgedCompletionsPerSlotCount * 2;
    assert.equal(policy.freeSlotCount({ running: 0, waiting: 0, held: 0, inFlight: allowance }), 2);
    assert.equal(policy.freeSlotCount({ running: 0, waiting: 0, held: 0, inFlight: allowance + 1 }), 1);
    assert.equal(policy.freeSlotCount({ running: 1, waiting: 1, held: 0, inFlight: 2 + allowance + 2 }), -2);
  });

  test('prefetch places count as slots; held runs take them unless holdAheadMax gives them places of their own', () => {
    assert.equal(policyOf({ prefetch: 4 }).freeSlotCount({ running: 8, waiting: 1, held: 2, inFlight: 11 }), 1);
    assert.equal(policyOf({ prefetch: 4, holdAheadMax: 1 }).freeSlotCount({ running: 8, waiting: 1, held: 2, inFlight: 11 }), 2);
  });
});

void describe('backoff', () => {
  test('after a failure nothing goes out before the backoff ends; a success resets the count', () => {
    const policy = policyOf();
    const first = policy.leaseFailed(1_000, () => 0.5, undefined, false);
    assert.deepEqual(first, { delayMs: 100, consecutiveErrors: 1 });
    assert.deepEqual(policy.next(1_040, 0, idle), { kind: 'wait', forMs: 60, time: 'clock' });
    assert.deepEqual(policy.leaseFailed(1_040, () => 0.5, undefined, false), { delayMs: 200, consecutiveErrors: 2 });
    assert.equal(policy.next(1_240, 0, idle).kind, 'lease');
    policy.leaseSucceeded();
    assert.equal(policy.leaseFailed(1_240, () => 0.5, undefined, false).consecutiveErrors, 1);
  });

  test('Retry-After wins over a shorter backoff; a refused connection is retried sooner', () => {
    assert.equal(policyOf().leaseFailed(0, () => 0.5, 3, false).delayMs, 3_000);
    const refused = policyOf();
    for (let index = 0; index < 10; index++) refused.leaseFailed(0, () => 0.5, undefined, true);
    assert.equal(refused.leaseFailed(0, () => 0.5, undefined, true).delayMs, 200);
  });
});

void describe('hold leases', () => {
  const holding = { holdAheadMax: 10, holdLingerMs: 100 };

  test('ask for the free hold places (one request at a time) before any slot lease', () => {
    const policy = policyOf(holding);
    assert.deepEqual(policy.next(0, 0, idle), { kind: 'lease-holds', places: 10 });
    policy.holdLeaseSent(10);
    assert.equal(policy.freeHoldCount(idle), 0);
    assert.deepEqual(policy.next(0, 0, idle), { kind: 'lease', max: 4 }, 'then slot leases as ever');
  });

  test('after a hold lease that came back short the next waits holdLingerMs on the clock', () => {
    const policy = policyOf(holding);
    policy.holdLeaseSent(10);
    policy.holdLeaseAnswered(10, 3, 1_000);
    policy.holdLeaseSettled(10);
    const holding3 = { running: 0, waiting: 0, held: 3, inFlight: 3 };
    policy.slotLeaseSent(4);
    policy.slotLeaseSent(4);
    assert.deepEqual(policy.next(1_050, 0, holding3), { kind: 'wait', forMs: 50, time: 'clock' },
      'slots all asked for: it sleeps until the hold linger ends');
    assert.deepEqual(policy.next(1_100, 0, holding3), { kind: 'lease-holds', places: 7 });
  });

  test('while hold leases come back full, up to longPolls go at once, splitting the places', () => {
    const policy = policyOf({ ...holding, longPolls: 2 });
    policy.holdLeaseSent(10);
    policy.holdLeaseAnswered(10, 10, 0);
    policy.holdLeaseSettled(10);
    const full = { running: 0, waiting: 0, held: 4, inFlight: 4 };
    assert.deepEqual(policy.next(0, 0, full), { kind: 'lease-holds', places: 3 });
    policy.holdLeaseSent(3);
    assert.deepEqual(policy.next(0, 0, full), { kind: 'lease-holds', places: 3 });
  });
});

void describe('workerSettingsOf', () => {
  const base = { baseUrl: 'http://127.0.0.1:1', pool: 'p', concurrency: 4, handler: () => undefined };

  test('fills in the defaults', () => {
    assert.deepEqual(workerSettingsOf(base), { concurrency: 4, prefetch: 0, waitS: 20, longPolls: 2, leaseLingerMs: 5,
      completionLingerMs: 10, leaseAheadMs: 0, holdAheadMax: 0, holdLingerMs: 0 });
    assert.equal(workerSettingsOf({ ...base, leaseAheadMs: 200 }).holdLingerMs, 50, 'a quarter of leaseAheadMs');
    assert.equal(workerSettingsOf({ ...base, leaseAheadMs: 8_000 }).holdLingerMs, 100, 'at most 100 ms');
  });

  test('refuses options out of range, naming them', () => {
    assert.throws(() => workerSettingsOf({ ...base, concurrency: 0 }), /concurrency must be a positive integer/);
    assert.throws(() => workerSettingsOf({ ...base, longPolls: 9 }), /longPolls must be an integer within 1\.\.8/);
    assert.throws(() => workerSettingsOf({ ...base, prefetch: 1.5 }), /prefetch must be an integer/);
    assert.throws(() => workerSettingsOf({ ...base, waitS: 61 }), /waitS must be within 0\.\.60/);
    assert.throws(() => workerSettingsOf({ pool: 'p', concurrency: 1, handler: () => undefined }), /needs a client or a baseUrl/);
  });
});
