// The create routes answer jobs as text made by hand (jobWireJson); it must be exactly the
// JSON of the object every other route answers (jobToWire), for any spec and either source
// of the spec's text (made on create, or read back from a row). The lease answer's runs are
// made by hand too (leasedRunWireJson), around the payload's stored text.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { specFromJson } from '../../src/domain/spec-json.js';
import type { JobRecord } from '../../src/domain/types.js';
import { jobToWire, jobWireJson, leasedRunToWire, leasedRunWireJson } from '../../src/api/wire.js';
import type { LeasedRun } from '../../src/store/store.js';
import { jobInput, jobSpec } from '../fixtures/jobs.js';

const nowMs = Date.UTC(2026, 10, 29, 12, 0, 0, 7);

function jobs(): JobRecord[] {
  const oneShot = jobInput(jobSpec({ at: new Date(nowMs + 60_000).toISOString() }), nowMs).job;
  const cron = jobInput(jobSpec({ cron: '0 2 * * *', tz: 'Europe/Berlin' }, {
    key: 'invoice "export" \u2603',
    payload: { text: 'line\nbreak \u0000 \ud83d\ude00', list: [1, -0, 1e21, null, true], nested: { deep: [{}] } },
    labels: { tier: 'gold', 'a.b': '' },
    resources: ['reporting-db'],
    max_silence_s: 172_800,
  }), nowMs, 'team-\u00e9').job;
  const done: JobRecord = { ...oneShot, state: 'done', nextFireAtMs: null, nextScheduledAtMs: null, updatedAtMs: nowMs + 1 };
  return [oneShot, cron, done];
}

void describe('jobWireJson', () => {
  void it('is the JSON text of jobToWire, for a spec made here', () => {
    for (const job of jobs()) assert.equal(jobWireJson(job), JSON.stringify(jobToWire(job)));
  });

  void it('is the JSON text of jobToWire, for a spec read back from its stored text', () => {
    for (const job of jobs()) {
      const readBack: JobRecord = { ...job, spec: specFromJson(JSON.stringify(job.spec)) };
      assert.equal(jobWireJson(readBack), JSON.stringify(jobToWire(readBack)));
      assert.deepEqual(JSON.parse(jobWireJson(readBack)), JSON.parse(jobWireJson(job)));
    }
  });
});

void describe('leasedRunWireJson', () => {
  void it('is the JSON text of the leased run object API.md describes, payload text passed through', () => {
    const payload = { text: 'line\nbreak "q" \u2603', list: [1, null, true] };
    const run: LeasedRun = {
      runId: 'run-"1"', jobId: 'job-\u00e9', team: 'team-\\a', attempt: 3, scheduledAtMs: nowMs, fireAtMs: nowMs + 1,
      dispatchedAtMs: nowMs + 2, payloadJson: JSON.stringify(payload), fencingToken: '18446744073709551615',
      leaseExpiresAtMs: nowMs + 30_000, readyAtMs: nowMs + 1,
    };
    assert.equal(leasedRunWireJson(run), JSON.stringify({
      run_id: run.runId, job_id: run.jobId, team: run.team, attempt: 3,
      scheduled_at: new Date(nowMs).toISOString(), fire_at: new Date(nowMs + 1).toISOString(),
      dispatched_at: new Date(nowMs + 2).toISOString(), payload, fencing_token: run.fencingToken,
      lease_expires_at: new Date(nowMs + 30_000).toISOString(), ready_at: new Date(nowMs + 1).toISOString(),
    }));
    // The object a worker straight to PostgreSQL gets is that text's value, field for field.
    assert.deepEqual(leasedRunToWire(run), JSON.parse(leasedRunWireJson(run)));
  });
});
