// Long-poll leases of a busy pool reach the store side by side: a request with no one parked
// for its pool leases at once instead of queueing behind another request's store call
// (on PostgreSQL each is a round trip, and queueing serialised every worker of a pool).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { cronJob, startHarness } from './harness.js';
import type { Store } from '../../src/store/store.js';

async function waitFor(condition: () => boolean): Promise<void> {
  for (let turn = 0; turn < 10_000 && !condition(); turn++) await new Promise((resolve) => setImmediate(resolve));
  assert.ok(condition(), 'condition never held');
}

describe('long-poll lease of a busy pool', () => {
  it('lets two requests lease from the store at the same time', async () => {
    let gate: Promise<void> | null = null;
    let openGate = (): void => undefined;
    let inFlight = 0;
    let inFlightMax = 0;
    const h = await startHarness({
      wrapStore: (store) => new Proxy(store, {
        get(target, property, receiver): unknown {
          if (property === 'leaseRuns') {
            const leaseRuns: Store['leaseRuns'] = async (request) => {
              inFlight++;
              inFlightMax = Math.max(inFlightMax, inFlight);
              try {
                if (gate !== null) await gate;
                return await target.leaseRuns(request);
              } finally {
                inFlight--;
              }
            };
            return leaseRuns;
          }
          const value: unknown = Reflect.get(target, property, receiver);
          return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
        },
      }),
    });
    try {
      for (let index = 0; index < 2; index++) {
        const created = await h.call('POST', '/v1/jobs', { body: cronJob({ pool: 'busy' }) });
        assert.equal((await h.call('POST', `/v1/jobs/${created.json.job_id}/trigger`)).status, 201);
      }
      gate = new Promise((resolve) => {
        openGate = resolve;
      });
      const first = h.call('POST', '/v1/workers/lease', { body: { pool: 'busy', max: 1, wait_s: 5 } });
      const second = h.call('POST', '/v1/workers/lease', { body: { pool: 'busy', max: 1, wait_s: 5 } });
      await waitFor(() => inFlight === 2);
      openGate();
      const answers = await Promise.all([first, second]);
      assert.deepEqual(answers.map((answer) => answer.json.runs.length), [1, 1]);
      assert.notEqual(answers[0]!.json.runs[0].run_id, answers[1]!.json.runs[0].run_id);
      assert.equal(inFlightMax, 2);
    } finally {
      openGate();
      await h.close();
    }
  });
});
