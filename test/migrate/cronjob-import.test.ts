// Kubernetes CronJob manifests through `importCronJobs`: each field mapped as docs/migration.md
// says, refusals one per manifest, and the jobs file accepted by a real server.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { importCronJobs, shellQuote } from '../../src/migrate/cronjob.js';
import { startHarness } from '../api/harness.js';

const manifests = `
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly-report, namespace: billing}
spec:
  schedule: "30 2 * * *"
  timeZone: Europe/Berlin
  concurrencyPolicy: Forbid
  startingDeadlineSeconds: 600
  jobTemplate:
    spec:
      activeDeadlineSeconds: 1800
      template:
        spec:
          containers:
            - name: report
              image: registry.example.com/report:1.4
              command: ["/app/report"]
              args: ["--since", "yesterday's close", "--format=csv"]
              workingDir: /app
              env:
                - {name: MODE, value: full}
                - name: DB_PASSWORD
                  valueFrom: {secretKeyRef: {name: db, key: password}}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: cleanup}
spec:
  schedule: "@hourly"
  concurrencyPolicy: Replace
  suspend: true
  jobTemplate:
    spec:
      template:
        spec:
          containers:
            - {name: c, image: busybox, command: ["sh", "-c", "rm -rf /tmp/*"]}
            - {name: sidecar, image: envoy}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: allow-default, namespace: ops}
spec:
  schedule: "*/5 * * * 1-5"
  suspend: false
  jobTemplate:
    spec:
      template:
        spec:
          containers: [{name: c, image: alpine, args: ["echo", "hi"]}]
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: entrypoint-only}
spec:
  schedule: "0 1 * * *"
  jobTemplate: {spec: {template: {spec: {containers: [{name: c, image: app}]}}}}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: tz-in-schedule}
spec:
  schedule: "CRON_TZ=UTC 0 1 * * *"
  jobTemplate: {spec: {template: {spec: {containers: [{name: c, image: app, command: [x]}]}}}}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: bad-schedule}
spec:
  schedule: "0 24 * * *"
  jobTemplate: {spec: {template: {spec: {containers: [{name: c, image: app, command: [x]}]}}}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: not-a-cronjob}
---
apiVersion: v1
kind: List
items:
  - apiVersion: batch/v1
    kind: CronJob
    metadata: {name: in-a-list, namespace: ops}
    spec:
      schedule: "0 0 1 */3 *"
      timeZone: America/New_York
      jobTemplate: {spec: {template: {spec: {containers: [{name: c, image: app, command: [/bin/quarterly]}]}}}}
`;

void describe('CronJob import', () => {
  const result = importCronJobs(manifests, { tz: 'UTC', pool: 'k8s', file: 'cronjobs.yaml' });
  const byKey = new Map(result.jobs.map((job) => [job.key, job]));

  it('maps schedule, timeZone, concurrencyPolicy, startingDeadlineSeconds, suspend, command, env, workingDir and deadline', () => {
    assert.deepEqual([...byKey.keys()].sort(),
      ['cronjob:billing:nightly-report', 'cronjob:default:cleanup', 'cronjob:ops:allow-default', 'cronjob:ops:in-a-list']);
    const nightly = byKey.get('cronjob:billing:nightly-report')!;
    assert.deepEqual(nightly.schedule, { cron: '30 2 * * *', tz: 'Europe/Berlin' });
    assert.equal(nightly.overlap, 'forbid');
    assert.equal(nightly.catch_up_window_s, 600);
    assert.equal(nightly.paused, undefined);
    assert.equal(nightly.pool, 'k8s');
    assert.deepEqual(nightly.payload.exec, {
      command: `/app/report --since 'yesterday'\\''s close' --format=csv`, env: { MODE: 'full' }, cwd: '/app', timeout_s: 1800,
    });
    assert.equal(nightly.payload.source['image'], 'registry.example.com/report:1.4');
    const cleanup = byKey.get('cronjob:default:cleanup')!;
    assert.deepEqual([cleanup.schedule, cleanup.overlap, cleanup.paused], [{ cron: '@hourly', tz: 'UTC' }, 'replace', true]);
    assert.equal(cleanup.payload.exec.command, `sh -c 'rm -rf /tmp/*'`);
    const allow = byKey.get('cronjob:ops:allow-default')!;
    assert.deepEqual([allow.overlap, allow.paused, allow.payload.exec.command], ['allow', false, 'echo hi']);
    assert.deepEqual(byKey.get('cronjob:ops:in-a-list')!.schedule, { cron: '0 0 1 */3 *', tz: 'America/New_York' });
  });

  it('refuses what it cannot carry over, one reason each, and notes what it leaves out', () => {
    const reasons = result.refused.map((problem) => `${problem.text}: ${problem.reason}`);
    assert.equal(reasons.length, 4, reasons.join('\n'));
    assert.ok(reasons.some((reason) => /entrypoint-only: .*no command or args/.test(reason)));
    assert.ok(reasons.some((reason) => /tz-in-schedule: .*spec.timeZone/.test(reason)));
    assert.ok(reasons.some((reason) => /bad-schedule: .*hour/.test(reason)));
    assert.ok(reasons.some((reason) => /ConfigMap.*only CronJob/.test(reason)));
    const notes = result.notes.map((note) => note.reason);
    assert.ok(notes.some((note) => /DB_PASSWORD comes from valueFrom/.test(note)));
    assert.ok(notes.some((note) => /only the first of 2 containers/.test(note)));
  });

  it('quotes words for the shell only where needed', () => {
    assert.equal(shellQuote('--format=csv'), '--format=csv');
    assert.equal(shellQuote('a b'), `'a b'`);
    assert.equal(shellQuote(`it's`), `'it'\\''s'`);
  });

  it('every imported job is accepted by the server as is', async () => {
    const h = await startHarness();
    try {
      for (const job of result.jobs) {
        const answer = await h.call('PUT', `/v1/jobs/by-key/${encodeURIComponent(job.key)}`, { body: job });
        assert.equal(answer.status, 201, answer.text);
        assert.equal(answer.json.job.state, job.paused === true ? 'paused' : 'active');
      }
    } finally {
      await h.close();
    }
  });
});
