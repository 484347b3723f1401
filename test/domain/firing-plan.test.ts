// planFiring and firstTimer: a late occurrence fires; occurrences due while the scheduler held
// the shard all fire; a backlog missed by an outage follows catch_up (latest, all, none) and
// catch_up_window_s; skipped rows are bounded and the rest summarised; DST-skipped
// occurrences are written skipped_dst; fire times carry the job's jitter.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { compileSchedule, countOccurrences, type CompiledSchedule } from '../../src/domain/schedule.js';
import { firstTimer, planFiring, type FiringPlan } from '../../src/domain/firing-plan.js';
import { jitterOffsetMs } from '../../src/domain/jitter.js';
import { catchUpSkippedRowsMax } from '../../src/limits.js';
import type { JobSpec, ScheduleSpec } from '../../src/domain/types.js';

const hourMs = 3_600_000;
const at = (iso: string): number => Date.parse(iso);
const iso = (ms: number): string => new Date(ms).toISOString();
const jobId = 'j_test_firing_plan';

function jobSpec(schedule: ScheduleSpec, overrides: Partial<JobSpec> = {}): JobSpec {
  return {
    key: null, schedule, pool: 'default', payload: null, lane: 'P1', tolerance_s: 0,
    retry: { max_attempts: 5, base_s: 30, max_s: 3_600 }, overlap: 'forbid', catch_up: 'latest',
    catch_up_window_s: 86_400, dst: { gap: 'shift', repeat: 'first' }, idempotency: 'keyed', lease_s: 60,
    max_silence_s: null, resources: [], labels: {}, ...overrides,
  };
}

function setup(cron: string, overrides: Partial<JobSpec> = {}, tz = 'UTC'): { spec: JobSpec; schedule: CompiledSchedule } {
  const spec = jobSpec({ cron, tz }, overrides);
  return { spec, schedule: compileSchedule(spec.schedule, spec.dst) };
}

/** Fired by a scheduler that has just come back: everything due up to nowMs was missed. */
function planAfterOutage(id: string, spec: JobSpec, schedule: CompiledSchedule,
  timer: { scheduledAtMs: number; fireAtMs: number }, nowMs: number): FiringPlan {
  return planFiring(id, spec, schedule, timer, nowMs, nowMs + 1);
}

/** "10:00 ready" lines, for readable comparisons. */
function describe(plan: FiringPlan): string[] {
  return plan.occurrences.map((occurrence) => `${iso(occurrence.scheduledAtMs).slice(11, 16)} ${occurrence.status}`);
}

void test('a one-shot fires once, however late, and leaves no next timer', () => {
  const spec = jobSpec({ at: '2026-01-01T10:00:00.000Z' });
  const schedule = compileSchedule(spec.schedule, spec.dst);
  const timer = firstTimer(jobId, spec, schedule, at('2026-06-01T00:00:00Z'));
  assert.deepEqual(timer, { scheduledAtMs: at('2026-01-01T10:00:00Z'), fireAtMs: at('2026-01-01T10:00:00Z') });
  const plan = planAfterOutage(jobId, spec, schedule, timer!, at('2026-06-01T00:00:00Z'));
  assert.deepEqual(plan, { occurrences: [{ scheduledAtMs: timer!.scheduledAtMs, fireAtMs: timer!.fireAtMs, status: 'ready' }], nextTimer: null });
});

void test('firstTimer is the first occurrence strictly after now, with jitter', () => {
  const { spec, schedule } = setup('0 * * * *', { tolerance_s: 300 });
  const jitterMs = jitterOffsetMs(jobId, 300, hourMs);
  assert.ok(jitterMs > 0 && jitterMs <= 300_000);
  assert.deepEqual(firstTimer(jobId, spec, schedule, at('2026-01-01T10:00:00Z')),
    { scheduledAtMs: at('2026-01-01T11:00:00Z'), fireAtMs: at('2026-01-01T11:00:00Z') + jitterMs });
});

void test('one overdue occurrence is late, not missed: it fires', () => {
  const { spec, schedule } = setup('0 * * * *');
  for (const nowIso of ['2026-01-01T10:00:00Z', '2026-01-01T10:59:59Z']) {
    const plan = planAfterOutage(jobId, spec, schedule, { scheduledAtMs: at('2026-01-01T10:00:00Z'), fireAtMs: at('2026-01-01T10:00:00Z') }, at(nowIso));
    assert.deepEqual(describe(plan), ['10:00 ready']);
    assert.equal(plan.summary, undefined);
    assert.deepEqual(plan.nextTimer, { scheduledAtMs: at('2026-01-01T11:00:00Z'), fireAtMs: at('2026-01-01T11:00:00Z') });
  }
});

const outageTimer = { scheduledAtMs: at('2026-01-01T10:00:00Z'), fireAtMs: at('2026-01-01T10:00:00Z') };
const afterOutageMs = at('2026-01-01T15:30:00Z');

void test('catch_up latest fires the most recent missed occurrence and skips the others', () => {
  const { spec, schedule } = setup('0 * * * *', { catch_up: 'latest' });
  const plan = planAfterOutage(jobId, spec, schedule, outageTimer, afterOutageMs);
  assert.deepEqual(describe(plan),
    ['10:00 skipped_outage', '11:00 skipped_outage', '12:00 skipped_outage', '13:00 skipped_outage', '14:00 skipped_outage', '15:00 ready']);
  assert.match(plan.occurrences[0]!.reason ?? '', /catch_up=latest/);
  assert.equal(plan.occurrences[0]!.fireAtMs, outageTimer.fireAtMs);
  assert.equal(iso(plan.nextTimer!.scheduledAtMs), '2026-01-01T16:00:00.000Z');
});

void test('catch_up none skips every missed occurrence and waits for the next one', () => {
  const { spec, schedule } = setup('0 * * * *', { catch_up: 'none' });
  const plan = planAfterOutage(jobId, spec, schedule, outageTimer, afterOutageMs);
  assert.deepEqual(describe(plan).map((line) => line.split(' ')[1]), Array(6).fill('skipped_outage'));
  assert.equal(iso(plan.nextTimer!.scheduledAtMs), '2026-01-01T16:00:00.000Z');
});

void test('catch_up all drains the backlog in order, one occurrence per firing', () => {
  const { spec, schedule } = setup('0 * * * *', { catch_up: 'all' });
  const first = planAfterOutage(jobId, spec, schedule, outageTimer, afterOutageMs);
  assert.deepEqual(describe(first), ['10:00 ready']);
  assert.equal(iso(first.nextTimer!.scheduledAtMs), '2026-01-01T11:00:00.000Z', 'the next missed one, overdue');
  const fired: string[] = [];
  let timer = first.nextTimer;
  let nowMs = afterOutageMs;
  while (timer !== null && timer.fireAtMs <= nowMs) {
    const plan = planAfterOutage(jobId, spec, schedule, timer, nowMs);
    fired.push(...describe(plan));
    timer = plan.nextTimer;
    nowMs += 1_000;
  }
  assert.deepEqual(fired, ['11:00 ready', '12:00 ready', '13:00 ready', '14:00 ready', '15:00 ready']);
  assert.equal(iso(timer!.scheduledAtMs), '2026-01-01T16:00:00.000Z');
});

void test('occurrences older than catch_up_window_s are skipped under every policy', () => {
  const window = { catch_up_window_s: 3 * 3_600 };
  const latest = setup('0 * * * *', { ...window, catch_up: 'latest' });
  assert.deepEqual(describe(planAfterOutage(jobId, latest.spec, latest.schedule, outageTimer, afterOutageMs)).slice(-1), ['15:00 ready']);
  const none = setup('0 * * * *', { ...window, catch_up: 'none' });
  assert.ok(describe(planAfterOutage(jobId, none.spec, none.schedule, outageTimer, afterOutageMs)).every((line) => line.endsWith('skipped_outage')));
  const all = setup('0 * * * *', { ...window, catch_up: 'all' });
  const plan = planAfterOutage(jobId, all.spec, all.schedule, outageTimer, afterOutageMs);
  assert.deepEqual(describe(plan), ['10:00 skipped_outage', '11:00 skipped_outage', '12:00 skipped_outage', '13:00 ready']);
  assert.match(plan.occurrences[0]!.reason ?? '', /catch_up_window_s=10800/);
  assert.equal(iso(plan.nextTimer!.scheduledAtMs), '2026-01-01T14:00:00.000Z');
  // A lone late occurrence older than the window is stale too.
  const daily = setup('0 10 * * *', { catch_up_window_s: 3_600 });
  const stale = planAfterOutage(jobId, daily.spec, daily.schedule, outageTimer, at('2026-01-01T12:00:00Z'));
  assert.deepEqual(describe(stale), ['10:00 skipped_outage']);
  assert.equal(iso(stale.nextTimer!.scheduledAtMs), '2026-01-02T10:00:00.000Z');
});

void test('a job every second resumed after a month writes bounded rows and summarises the rest', () => {
  for (const catchUp of ['latest', 'none', 'all'] as const) {
    const { spec, schedule } = setup('* * * * * *', { catch_up: catchUp });
    const timer = { scheduledAtMs: at('2026-01-01T00:00:00Z'), fireAtMs: at('2026-01-01T00:00:00Z') };
    const nowMs = at('2026-01-31T00:00:00Z');
    const startedMs = performance.now();
    const plan = planAfterOutage(jobId, spec, schedule, timer, nowMs);
    assert.ok(performance.now() - startedMs < 3_000, `${catchUp}: bounded time`);
    const skippedRows = plan.occurrences.filter((occurrence) => occurrence.status !== 'ready');
    const readyRows = plan.occurrences.filter((occurrence) => occurrence.status === 'ready');
    assert.ok(skippedRows.length <= catchUpSkippedRowsMax, `${catchUp}: ${skippedRows.length} rows`);
    const totalMissed = 30 * 86_400 + 1;
    const accounted = plan.occurrences.length + (plan.summary?.skippedCount ?? 0);
    if (catchUp === 'all') {
      // Only the stale part (older than a day) is skipped now; the rest drains later.
      assert.equal(accounted, countOccurrences(schedule, timer.scheduledAtMs - 1, nowMs - 86_400_000) + 1);
      assert.equal(iso(readyRows[0]!.scheduledAtMs), '2026-01-30T00:00:00.000Z');
      assert.equal(iso(plan.nextTimer!.scheduledAtMs), '2026-01-30T00:00:01.000Z');
    } else {
      assert.equal(accounted, totalMissed, `${catchUp}: every missed occurrence is a row or counted`);
      assert.equal(iso(plan.nextTimer!.scheduledAtMs), '2026-01-31T00:00:01.000Z');
    }
    assert.equal(plan.summary!.fromScheduledAtMs, timer.scheduledAtMs);
    assert.equal(plan.summary!.toScheduledAtMs, skippedRows[0]!.scheduledAtMs - 1_000, 'the summary ends where the rows begin');
    const times = plan.occurrences.map((occurrence) => occurrence.scheduledAtMs);
    assert.deepEqual(times, [...times].sort((left, right) => left - right), 'scheduled order');
    if (catchUp === 'latest') assert.equal(iso(readyRows[0]!.scheduledAtMs), '2026-01-31T00:00:00.000Z');
    if (catchUp === 'none') assert.equal(readyRows.length, 0);
  }
});

void test('a DST-skipped occurrence is written skipped_dst when its timer fires', () => {
  const { spec, schedule } = setup('30 2 * * *', { dst: { gap: 'skip', repeat: 'first' } }, 'America/New_York');
  const timer = firstTimer(jobId, spec, schedule, at('2026-03-07T12:00:00Z'))!;
  assert.equal(iso(timer.scheduledAtMs), '2026-03-08T07:30:00.000Z');
  const plan = planAfterOutage(jobId, spec, schedule, timer, timer.fireAtMs);
  assert.deepEqual(plan.occurrences.map((occurrence) => occurrence.status), ['skipped_dst']);
  assert.match(plan.occurrences[0]!.reason ?? '', /DST/);
  assert.equal(iso(plan.nextTimer!.scheduledAtMs), '2026-03-09T06:30:00.000Z');
});

void test('in a backlog, a DST-skipped occurrence stays skipped_dst and the latest fireable one fires', () => {
  const { spec, schedule } = setup('30 2 * * *', { dst: { gap: 'skip', repeat: 'first' }, catch_up_window_s: 7 * 86_400 }, 'America/New_York');
  const timer = { scheduledAtMs: at('2026-03-07T07:30:00Z'), fireAtMs: at('2026-03-07T07:30:00Z') };
  const plan = planAfterOutage(jobId, spec, schedule, timer, at('2026-03-09T07:00:00Z'));
  assert.deepEqual(plan.occurrences.map((occurrence) => `${iso(occurrence.scheduledAtMs)} ${occurrence.status}`), [
    '2026-03-07T07:30:00.000Z skipped_outage', '2026-03-08T07:30:00.000Z skipped_dst', '2026-03-09T06:30:00.000Z ready',
  ]);
});

void test('fire times carry the job jitter; the fired timer keeps its own fire time', () => {
  const { spec, schedule } = setup('0 * * * *', { tolerance_s: 600, catch_up: 'latest' });
  const jitterMs = jitterOffsetMs(jobId, 600, hourMs);
  const timer = { scheduledAtMs: outageTimer.scheduledAtMs, fireAtMs: outageTimer.scheduledAtMs + jitterMs };
  const plan = planAfterOutage(jobId, spec, schedule, timer, afterOutageMs);
  for (const occurrence of plan.occurrences) assert.equal(occurrence.fireAtMs, occurrence.scheduledAtMs + jitterMs);
  assert.equal(plan.nextTimer!.fireAtMs, plan.nextTimer!.scheduledAtMs + jitterMs);
});

/**
 * Fires a timer and then each next timer already due, as the scheduler's wheel does with an
 * overdue next timer, all at nowMs: the whole record one pass of catching up writes.
 */
function drainDue(spec: JobSpec, schedule: CompiledSchedule, timer: { scheduledAtMs: number; fireAtMs: number },
  nowMs: number, presentSinceMs: number): { written: string[]; reasons: Set<string>; next: number | null } {
  const written: string[] = [];
  const reasons = new Set<string>();
  let pending: { scheduledAtMs: number; fireAtMs: number } | null = timer;
  for (let dispatches = 0; pending !== null && pending.fireAtMs <= nowMs; dispatches++) {
    assert.ok(dispatches < 10_000, 'the backlog drains');
    const plan = planFiring(jobId, spec, schedule, pending, nowMs, presentSinceMs);
    for (const occurrence of plan.occurrences) {
      written.push(`${iso(occurrence.scheduledAtMs).slice(11, 19)} ${occurrence.status}`);
      if (occurrence.reason !== undefined) reasons.add(occurrence.reason);
    }
    pending = plan.nextTimer;
  }
  return { written, reasons, next: pending?.scheduledAtMs ?? null };
}

void test('occurrences that came due while the scheduler held the shard are late, not missed: each fires, in order', () => {
  // 200 every-second jobs created in one batch whose commit took 2.9 s: the first timer
  // (10:00:01) reached the wheel at 10:00:03.4, with the scheduler up the whole time.
  for (const catchUp of ['latest', 'none', 'all'] as const) {
    const { spec, schedule } = setup('* * * * * *', { catch_up: catchUp });
    const drained = drainDue(spec, schedule, { scheduledAtMs: at('2026-01-01T10:00:01Z'), fireAtMs: at('2026-01-01T10:00:01Z') },
      at('2026-01-01T10:00:03.400Z'), at('2026-01-01T09:00:00Z'));
    assert.deepEqual(drained.written, ['10:00:01 ready', '10:00:02 ready', '10:00:03 ready'], `catch_up ${catchUp}`);
    assert.equal(drained.next, at('2026-01-01T10:00:04Z'));
  }
});

void test('after an outage, catch_up chooses among the missed occurrences only; those due since the scheduler came back all fire', () => {
  const { spec, schedule } = setup('* * * * *', { catch_up: 'latest' });
  const backAtMs = at('2026-01-01T10:30:00Z');
  const drained = drainDue(spec, schedule, { scheduledAtMs: at('2026-01-01T10:00:00Z'), fireAtMs: at('2026-01-01T10:00:00Z') },
    at('2026-01-01T10:32:30Z'), backAtMs);
  const expectedSkipped = Array.from({ length: 29 }, (_, minute) => `10:${String(minute).padStart(2, '0')}:00 skipped_outage`);
  assert.deepEqual(drained.written, [...expectedSkipped, '10:29:00 ready', '10:30:00 ready', '10:31:00 ready', '10:32:00 ready']);
  assert.deepEqual([...drained.reasons], ['missed while the scheduler was down; catch_up=latest']);

  const none = setup('* * * * *', { catch_up: 'none' });
  const drainedNone = drainDue(none.spec, none.schedule, { scheduledAtMs: at('2026-01-01T10:00:00Z'), fireAtMs: at('2026-01-01T10:00:00Z') },
    at('2026-01-01T10:32:30Z'), backAtMs);
  assert.equal(drainedNone.written.filter((line) => line.endsWith('skipped_outage')).length, 30);
  assert.deepEqual(drainedNone.written.filter((line) => line.endsWith('ready')), ['10:30:00 ready', '10:31:00 ready', '10:32:00 ready']);
});

void test('no occurrence due at or after presentSinceMs is ever recorded missed while the scheduler was down', () => {
  const startMs = at('2026-01-01T10:00:00Z');
  for (const catchUp of ['latest', 'none', 'all'] as const) {
    for (const presentOffsetS of [-60, 0, 7, 30, 59, 61, 95]) {
      const { spec, schedule } = setup('*/5 * * * * *', { catch_up: catchUp });
      const presentSinceMs = startMs + presentOffsetS * 1_000;
      let pending: { scheduledAtMs: number; fireAtMs: number } | null = { scheduledAtMs: startMs, fireAtMs: startMs };
      const nowMs = startMs + 100_000;
      while (pending !== null && pending.fireAtMs <= nowMs) {
        const plan: FiringPlan = planFiring(jobId, spec, schedule, pending, nowMs, presentSinceMs);
        for (const occurrence of plan.occurrences) {
          if (occurrence.scheduledAtMs >= presentSinceMs) {
            assert.equal(occurrence.status, 'ready', `${iso(occurrence.scheduledAtMs)} catch_up ${catchUp} present from ${presentOffsetS} s`);
          }
        }
        pending = plan.nextTimer;
      }
    }
  }
});
