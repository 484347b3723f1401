// `verify`'s comparison (missing, late, extra, pending; the cron log) and `apply --dry-run`'s
// DST warnings, on their own.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { compareCronLog, compareJob, parseCronLog } from '../../src/migrate/verify.js';
import { dstWarnings } from '../../src/migrate/dst-warnings.js';
import type { Job, Run } from '../../src/worker/wire.js';

const hourMs = 3_600_000;
const t0 = Date.parse('2026-03-01T00:00:00.000Z');
const iso = (ms: number): string => new Date(ms).toISOString();

const job = {
  job_id: 'j_1', key: 'k', team: 'default', state: 'active', schedule: { cron: '0 * * * *', tz: 'UTC' }, dst: { gap: 'shift', repeat: 'first' },
  tolerance_s: 300, created_at: iso(t0 - hourMs), updated_at: iso(t0 - hourMs),
  payload: { exec: { command: '/bin/tick' }, source: { user: 'deploy' } },
} as unknown as Job;

function run(scheduledMs: number, status: Run['status'], startedLateS: number | null): Run {
  return { run_id: `r_${scheduledMs}`, job_id: 'j_1', scheduled_at: iso(scheduledMs), status, last_error: null,
    started_at: startedLateS === null ? null : iso(scheduledMs + startedLateS * 1000) } as unknown as Run;
}

void describe('verify', () => {
  it('finds missing, skipped, late, pending and extra runs in the window, and nothing else', () => {
    const runs = [
      run(t0, 'succeeded', 0),
      run(t0 + hourMs, 'succeeded', 10),
      // 02:00 has no run
      run(t0 + 3 * hourMs, 'skipped_outage', null),
      run(t0 + 4 * hourMs, 'succeeded', 301),
      run(t0 + 5 * hourMs, 'ready', null),
      run(t0 + 5 * hourMs + 60_000, 'succeeded', 1),
    ];
    const findings = compareJob(job, runs, t0, t0 + 5.5 * hourMs).map((finding) => `${finding.kind} ${finding.at}`);
    assert.deepEqual(findings.sort(), [
      `extra ${iso(t0 + 5 * hourMs + 60_000)}`,
      `late ${iso(t0 + 4 * hourMs)}`,
      `missing ${iso(t0 + 2 * hourMs)}`,
      `missing ${iso(t0 + 3 * hourMs)}`,
      `pending ${iso(t0 + 5 * hourMs)}`,
    ].sort());
  });

  it('reads Debian, RHEL and ISO-stamped cron lines in the log\'s zone and finds what tickler did not run', () => {
    const log = [
      'Mar  1 02:00:01 web-1 CRON[11]: (deploy) CMD (/bin/tick)',
      'Mar  1 02:00:01 web-1 CROND[12]: (deploy) CMD (/bin/tick%stdin)',
      '2026-03-01T01:00:01.5+01:00 web-1 CRON[13]: (deploy) CMD (/bin/tick)',
      'Mar  1 02:00:01 web-1 CRON[14]: (root) CMD (/bin/tick)',
    ].join('\n');
    const toInstant = (wallMs: number): number => wallMs - hourMs; // the log's zone is UTC+1
    const entries = parseCronLog(log, 'Europe/Berlin', t0, toInstant);
    assert.deepEqual(entries.map((entry) => [iso(entry.atMs), entry.user, entry.command]), [
      [iso(t0 + hourMs + 1000), 'deploy', '/bin/tick'],
      [iso(t0 + hourMs + 1000), 'deploy', '/bin/tick%stdin'],
      [iso(t0 + 1500), 'deploy', '/bin/tick'],
      [iso(t0 + hourMs + 1000), 'root', '/bin/tick'],
    ]);
    const findings = compareCronLog(entries, [{ job, runs: [run(t0 + hourMs, 'succeeded', 1)] }], t0, t0 + 2 * hourMs);
    assert.deepEqual(findings.map((finding) => `${finding.kind} ${finding.key} ${finding.at}`), [
      `cron_only k ${iso(t0 + 1500)}`,
      `cron_only (root) /bin/tick ${iso(t0 + hourMs + 1000)}`,
    ]);
  });
});

void describe('DST warnings', () => {
  const from = Date.parse('2026-01-01T00:00:00Z');
  it('warns of fixed times in the spring gap and the autumn repeat, on days the schedule runs', () => {
    const warnings = dstWarnings('30 2 * * *', 'Europe/Berlin', from);
    assert.deepEqual(warnings.map((warning) => [warning.kind, warning.times]), [['gap', ['02:30']], ['repeat', ['02:30']]]);
    assert.match(warnings[0]!.at, /^2026-03-29T03:00:00.000\+02:00$/);
    assert.deepEqual(dstWarnings('30 2 * * 1', 'Europe/Berlin', from), [], 'both changes fall on a Sunday');
    assert.deepEqual(dstWarnings('30 3 * * *', 'Europe/Berlin', from).map((warning) => warning.kind), [], '03:30 is neither');
    assert.deepEqual(dstWarnings('30 1 * * *', 'America/New_York', from).map((warning) => warning.kind), ['repeat']);
    assert.deepEqual(dstWarnings('*/10 * * * *', 'Europe/Berlin', from), [], 'interval-like schedules follow real time');
    assert.deepEqual(dstWarnings('30 2 * * *', 'UTC', from), []);
  });
});
