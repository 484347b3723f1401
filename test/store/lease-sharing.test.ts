// The PostgreSQL store's lease sharing (src/store/postgres/lease-sharing.ts): one lease
// statement in flight per pool, and the leases that arrive meanwhile go together. The
// statements here are stand-ins that record what they were asked and answer when the test says:
// what is tested is the order and grouping, which the database plays no part in. The store's
// own shared statement is tested against PostgreSQL in the store conformance suite ("several
// workers leasing at once").
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LeaseSharing, oneStatementOf } from '../../src/store/postgres/lease-sharing.js';
import type { LeasedRun, LeaseRunsRequest } from '../../src/store/store.js';

function lease(workerId: string, overrides: Partial<LeaseRunsRequest> = {}): LeaseRunsRequest {
  return { team: 'team-a', pool: 'pool-a', max: 10, leaseMs: null, workerId, nowMs: 1_000, ...overrides };
}

/** A run whose id names the worker that leased it. */
function runFor(request: LeaseRunsRequest, index: number): LeasedRun {
  return {
    runId: `${request.workerId}-${index}`, jobId: 'job', team: 'team-a', attempt: 1, scheduledAtMs: 0, fireAtMs: 0,
    dispatchedAtMs: 0, payloadJson: 'null', fencingToken: String(index + 1), leaseExpiresAtMs: 0, readyAtMs: 0,
  };
}

interface Call {
  workerIds: (string | null)[];
  finish(): void;
  fail(error: Error): void;
}

/** Sharing over statements that answer one run per lease when `finish` is called. */
function recordingSharing(runsMax = 1_000): { sharing: LeaseSharing; calls: Call[] } {
  const calls: Call[] = [];
  const statement = (requests: LeaseRunsRequest[]): Promise<LeasedRun[][]> => new Promise((resolve, reject) => {
    calls.push({
      workerIds: requests.map((request) => request.workerId),
      finish: () => resolve(requests.map((request) => [runFor(request, 0)])),
      fail: reject,
    });
  });
  const sharing = new LeaseSharing(async (request) => (await statement([request]))[0]!, statement, runsMax);
  return { sharing, calls };
}

/** Lets settled promises run their callbacks. */
const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

void describe('lease sharing (PostgreSQL store)', () => {
  void it('sends a lease of an idle pool at once, and a lease of another pool beside it', async () => {
    const { sharing, calls } = recordingSharing();
    const first = sharing.lease(lease('w1'));
    const otherPool = sharing.lease(lease('w2', { pool: 'pool-b' }));
    assert.deepEqual(calls.map((call) => call.workerIds), [['w1'], ['w2']]);
    calls.forEach((call) => call.finish());
    assert.deepEqual((await first).map((run) => run.runId), ['w1-0']);
    assert.deepEqual((await otherPool).map((run) => run.runId), ['w2-0']);
  });

  void it('sends the leases that arrived meanwhile together, in arrival order; one that cannot share goes next, alone', async () => {
    const { sharing, calls } = recordingSharing();
    const answers = [
      sharing.lease(lease('w1')),
      sharing.lease(lease('w2')),
      sharing.lease(lease('w3', { leaseMs: 5_000 })),
      sharing.lease(lease('w4', { nowMs: 1_002 })),
      sharing.lease(lease('w5', { team: null })),
      sharing.lease(lease('w6')),
    ];
    assert.equal(calls.length, 1, 'one statement in flight for the pool');
    calls[0]!.finish();
    await settle();
    assert.deepEqual(calls.map((call) => call.workerIds), [['w1'], ['w2', 'w4', 'w6']]);
    calls[1]!.finish();
    await settle();
    assert.deepEqual(calls[2]!.workerIds, ['w3']);
    calls[2]!.finish();
    await settle();
    assert.deepEqual(calls[3]!.workerIds, ['w5']);
    calls[3]!.finish();
    const runIds = (await Promise.all(answers)).map((runs) => runs.map((run) => run.runId));
    assert.deepEqual(runIds, [['w1-0'], ['w2-0'], ['w3-0'], ['w4-0'], ['w5-0'], ['w6-0']], 'each lease gets its own share');
  });

  void it('keeps a shared statement within runsMax, and sends a lease taken in two passes alone', async () => {
    const { sharing, calls } = recordingSharing(1_000);
    const answers = [
      sharing.lease(lease('w1')),
      sharing.lease(lease('w2', { max: 600 })),
      sharing.lease(lease('w3', { max: 600 })),
      sharing.lease(lease('w4', { max: 400 })),
      sharing.lease(lease('w5', { max: 10, readyMax: 2, aheadMs: 8_000 })),
    ];
    for (const expected of [['w1'], ['w2', 'w4'], ['w3'], ['w5']]) {
      await settle();
      assert.deepEqual(calls.at(-1)!.workerIds, expected);
      calls.at(-1)!.finish();
    }
    await Promise.all(answers);
    assert.equal(calls.length, 4);
  });

  void it('rejects every lease a failed statement carried, and goes on with the next', async () => {
    const { sharing, calls } = recordingSharing();
    const first = sharing.lease(lease('w1'));
    const second = sharing.lease(lease('w2'));
    const third = sharing.lease(lease('w3'));
    const after = sharing.lease(lease('w4', { leaseMs: 5_000 }));
    calls[0]!.finish();
    await first;
    await settle();
    calls[1]!.fail(new Error('connection lost'));
    await assert.rejects(second, /connection lost/);
    await assert.rejects(third, /connection lost/);
    await settle();
    assert.deepEqual(calls[2]!.workerIds, ['w4']);
    calls[2]!.finish();
    assert.deepEqual((await after).map((run) => run.runId), ['w4-0']);
  });

  void it('reads a lease as one statement: all of max, or only the ready part without a look-ahead', () => {
    assert.deepEqual(oneStatementOf(lease('w', { max: 10 })), { max: 10, aheadMs: 0 });
    assert.deepEqual(oneStatementOf(lease('w', { max: 10, aheadMs: 8_000 })), { max: 10, aheadMs: 8_000 });
    assert.deepEqual(oneStatementOf(lease('w', { max: 10, readyMax: 4 })), { max: 4, aheadMs: 0 });
    assert.equal(oneStatementOf(lease('w', { max: 10, readyMax: 4, aheadMs: 8_000 })), null);
  });
});
