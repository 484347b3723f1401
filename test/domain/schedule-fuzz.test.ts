// Fuzzing the schedule parsers (TESTING.md "Bad input"): whatever arrives, compileSchedule
// answers a compiled schedule or a TicklerError, in bounded time; and what compiles can be
// queried without throwing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { compileSchedule, nextOccurrence, occurrencesAfter } from '../../src/domain/schedule.js';
import { TicklerError } from '../../src/errors.js';
import type { DstSpec, ScheduleSpec } from '../../src/domain/types.js';

const dst: DstSpec = { gap: 'shift', repeat: 'first' };
const callMsMax = 250;

function compileOrTicklerError(spec: unknown, rules: unknown = dst): ReturnType<typeof compileSchedule> | null {
  const startedMs = performance.now();
  try {
    return compileSchedule(spec as ScheduleSpec, rules as DstSpec);
  } catch (error) {
    assert.ok(error instanceof TicklerError, `not a TicklerError for ${JSON.stringify(spec)?.slice(0, 120)}: ${String(error)}`);
    assert.ok(['invalid_schedule', 'invalid_timezone'].includes(error.code));
    assert.ok(error.field !== undefined, 'names the field at fault');
    return null;
  } finally {
    assert.ok(performance.now() - startedMs < callMsMax, `slow for ${JSON.stringify(spec)?.slice(0, 120)}`);
  }
}

/** Tokens a cron expression is made of, so the fuzzer reaches deep into the grammar. */
const cronToken = fc.constantFrom('*', '?', '/', '-', ',', 'L', 'W', '#', ' ', '0', '1', '5', '7', '12', '31', '59', '60',
  '99', 'JAN', 'mon', 'FRI', '@daily', '@', 'LW', '5L', '1#2', '*/0', '*/15', '\t', '\u0000', '１');
const cronLike = fc.array(cronToken, { maxLength: 40 }).map((tokens) => tokens.join(''));
/** Grammatical items with plausible and out-of-range values, so that many expressions do compile. */
const value = fc.oneof(fc.integer({ min: 0, max: 65 }).map(String), fc.constantFrom('JAN', 'dec', 'MON', 'sun', '7'));
const item = fc.oneof(
  value, fc.constant('*'), fc.constant('*'), fc.constant('L'),
  fc.tuple(value, value).map(([first, last]) => `${first}-${last}`),
  fc.integer({ min: 0, max: 70 }).map((step) => `*/${step}`),
  fc.tuple(value, fc.integer({ min: 0, max: 70 })).map(([first, step]) => `${first}/${step}`),
  value.map((day) => `${day}W`), value.map((day) => `${day}L`),
  fc.tuple(value, fc.integer({ min: 0, max: 6 })).map(([day, nth]) => `${day}#${nth}`),
);
const fieldLike = fc.oneof(fc.array(item, { minLength: 1, maxLength: 3 }).map((items) => items.join(',')),
  fc.array(cronToken.filter((token) => token !== ' '), { minLength: 1, maxLength: 6 }).map((tokens) => tokens.join('')));
const fiveOrSixFields = fc.array(fieldLike, { minLength: 5, maxLength: 6 }).map((fields) => fields.join(' '));
/** A valid expression with one or two fields replaced: mostly valid, sometimes subtly not. */
const mutatedValid = fc.tuple(
  fc.constantFrom('0 0 * * *', '*/5 * * * *', '0 9 * * 1-5', '30 2 1 * *', '0 0 0 L * *', '15 10 ? * 5L'),
  fc.array(fc.tuple(fc.nat(5), fieldLike), { minLength: 1, maxLength: 2 }),
).map(([base, replacements]) => {
  const fields = base.split(' ');
  for (const [index, field] of replacements) fields[index % fields.length] = field;
  return fields.join(' ');
});

void test('compileSchedule answers a schedule or a TicklerError for arbitrary cron text', () => {
  let compiledCount = 0;
  fc.assert(fc.property(fc.oneof(fc.string({ maxLength: 64 }), fc.string({ unit: 'binary', maxLength: 64 }), cronLike, fiveOrSixFields, mutatedValid, mutatedValid),
    fc.constantFrom('UTC', 'America/New_York', 'Australia/Lord_Howe'),
    (cron, tz) => {
      const schedule = compileOrTicklerError({ cron, tz });
      if (schedule === null) return;
      compiledCount++;
      const startedMs = performance.now();
      const occurrences = occurrencesAfter(schedule, Date.UTC(2026, 0, 1), 5);
      assert.ok(occurrences.length > 0, `${cron} compiled but never fires`);
      assert.ok(performance.now() - startedMs < 1_000, `slow occurrences for ${cron}`);
    }), { numRuns: 1_500 });
  assert.ok(compiledCount > 20, `the fuzzer reached valid expressions ${compiledCount} times`);
});

void test('compileSchedule answers a schedule or a TicklerError for arbitrary zones, times and shapes', () => {
  fc.assert(fc.property(fc.oneof(fc.string({ maxLength: 40 }), fc.constantFrom('Europe/Berlin', 'europe/berlin', 'Etc/GMT+5', 'EST')),
    (tz) => { compileOrTicklerError({ cron: '0 0 * * *', tz }); }), { numRuns: 300 });
  fc.assert(fc.property(fc.oneof(fc.string({ maxLength: 40 }), fc.date({ noInvalidDate: true }).map((date) => date.toISOString())),
    (atText) => {
      const schedule = compileOrTicklerError({ at: atText });
      if (schedule !== null) assert.ok(Number.isFinite(schedule.atMs) && schedule.atMs! < Date.UTC(10_000, 0, 1));
    }), { numRuns: 500 });
  fc.assert(fc.property(fc.anything(), fc.anything(), (spec, rules) => { compileOrTicklerError(spec, rules); }), { numRuns: 500 });
});

void test('hostile input stays cheap: long lists, many steps, far-away times', () => {
  const longList = Array.from({ length: 2_000 }, (_, index) => index % 60).join(',');
  for (const cron of [`${longList} * * * *`, `${'1-59/1,'.repeat(120)}0 * * * *`, `0 0 ${'31W,'.repeat(200)}30 2 *`,
    `${'*/1,'.repeat(250)}* * * * * *`]) {
    compileOrTicklerError({ cron, tz: 'UTC' });
  }
  const schedule = compileSchedule({ cron: '0 0 1 1 *', tz: 'America/New_York' }, dst);
  const startedMs = performance.now();
  assert.equal(nextOccurrence(schedule, Date.UTC(9_999, 5, 1)), null);
  assert.deepEqual(occurrencesAfter(schedule, Number.MAX_SAFE_INTEGER, 3), []);
  assert.equal(occurrencesAfter(schedule, -8.64e15, 1).length, 1);
  assert.ok(performance.now() - startedMs < 2_000);
});
