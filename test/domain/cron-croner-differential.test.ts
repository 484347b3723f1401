// Our cron parser against croner, a well-kept library for the same grammar (STACK.md). In
// UTC there is no DST rule to apply, so both must name the same instants for every
// expression of the shared grammar: lists, ranges, steps, names, `L`, `W`, `#`, seconds,
// and Vixie's either-day rule when both day fields are restricted. tickler keeps its own
// parser for the DST rules (src/domain/schedule/cron-expression.ts); this test is what
// keeps it honest about the grammar.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { Cron } from 'croner';
import { compileSchedule, occurrencesAfter } from '../../src/domain/schedule.js';
import { TicklerError } from '../../src/errors.js';

const dst = { gap: 'shift', repeat: 'first' } as const;
const occurrencesCompared = 12;
/** Both searches stop here, inside the look-ahead of ours (8 years): a leap-day cron has one in four. */
const horizonMs = 4 * 365 * 86_400_000;

function tokenArbitrary(min: number, max: number, names: readonly string[] = []): fc.Arbitrary<string> {
  const value = fc.integer({ min, max });
  const named = names.length === 0 ? value.map(String)
    : fc.oneof(value.map(String), fc.integer({ min: 0, max: names.length - 1 }).map((index) => names[index]!));
  return fc.oneof(
    named,
    fc.tuple(value, value).map(([left, right]) => `${Math.min(left, right)}-${Math.max(left, right)}`),
    fc.tuple(value, fc.integer({ min: 1, max: Math.max(1, max - min) })).map(([start, step]) => `${start}/${step}`),
    fc.integer({ min: 1, max: Math.max(1, max - min) }).map((step) => `*/${step}`),
  );
}

function fieldArbitrary(min: number, max: number, names: readonly string[] = []): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 2, arbitrary: fc.constant('*') },
    { weight: 3, arbitrary: fc.array(tokenArbitrary(min, max, names), { minLength: 1, maxLength: 3 }).map((items) => items.join(',')) },
  );
}

const months = ['JAN', 'FEB', 'MAR', 'APR', 'MAY', 'JUN', 'JUL', 'AUG', 'SEP', 'OCT', 'NOV', 'DEC'];
const weekdays = ['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT'];

const dayOfMonthArbitrary = fc.oneof(
  { weight: 4, arbitrary: fieldArbitrary(1, 31) },
  { weight: 1, arbitrary: fc.constantFrom('L', 'LW', '15W', '1W', '31W') },
);
const dayOfWeekArbitrary = fc.oneof(
  { weight: 4, arbitrary: fieldArbitrary(0, 6, weekdays) },
  { weight: 1, arbitrary: fc.tuple(fc.integer({ min: 0, max: 6 }), fc.integer({ min: 1, max: 5 }))
    .map(([day, nth]) => `${day}#${nth}`) },
  { weight: 1, arbitrary: fc.integer({ min: 0, max: 6 }).map((day) => `${day}L`) },
);

/** Five fields, or six with seconds first. */
const cronArbitrary = fc.tuple(
  fc.option(fieldArbitrary(0, 59), { nil: undefined }),
  fieldArbitrary(0, 59), fieldArbitrary(0, 23), dayOfMonthArbitrary, fieldArbitrary(1, 12, months), dayOfWeekArbitrary,
).map(([second, ...rest]) => (second === undefined ? rest : [second, ...rest]).join(' '));

const instantArbitrary = fc.integer({ min: Date.UTC(2000, 0, 1), max: Date.UTC(2036, 0, 1) });

/** A day-of-week `N/STEP` that lands on 7, the Sunday only a 0-7 field has. */
function stepReachesSeven(token: string): boolean {
  const match = /^(\d+)\/(\d+)$/.exec(token);
  return match !== null && (7 - Number(match[1])) % Number(match[2]) === 0;
}

/** Ours refuses a cron that can never fire (`31W` in September); croner then names nothing. */
function oursNext(cron: string, afterMs: number): number[] {
  let schedule;
  try {
    schedule = compileSchedule({ cron, tz: 'UTC' }, dst);
  } catch (error) {
    if (error instanceof TicklerError && error.code === 'invalid_schedule' && error.message.includes('never fires')) return [];
    throw error;
  }
  return occurrencesAfter(schedule, afterMs, occurrencesCompared, afterMs + horizonMs)
    .map((occurrence) => occurrence.scheduledAtMs);
}

function cronerNext(cron: string, afterMs: number): number[] {
  // `domAndDow: false` is Vixie's either-day rule, which tickler follows; `sloppyRanges`
  // accepts `N/STEP` (from N to the field's end), which tickler's grammar has.
  const job = new Cron(cron, { timezone: 'UTC', domAndDow: false, sloppyRanges: true, paused: true });
  const instants: number[] = [];
  let from = new Date(afterMs);
  while (instants.length < occurrencesCompared) {
    const next = job.nextRun(from);
    if (next === null || next.getTime() >= afterMs + horizonMs) break;
    instants.push(next.getTime());
    from = next;
  }
  return instants;
}

void test('names the same next occurrences as croner for every expression of the shared grammar, in UTC', () => {
  fc.assert(fc.property(cronArbitrary, instantArbitrary, (cron, afterMs) => {
    // Two deliberate differences, both Vixie cron's: a day field that begins with `*` (say
    // `*/1,1`) is unrestricted, where croner calls only a bare `*` so; and day-of-week runs
    // 0-7, so `2/5` is Tuesday and Sunday (7), where croner stops at 6.
    const fields = cron.split(' ');
    fc.pre([fields.at(-3)!, fields.at(-1)!].every((field) => field === '*' || !field.startsWith('*')));
    fc.pre(!fields.at(-1)!.split(',').some(stepReachesSeven));
    assert.deepEqual(oursNext(cron, afterMs), cronerNext(cron, afterMs), `cron "${cron}" after ${new Date(afterMs).toISOString()}`);
  }), { numRuns: Number(process.env.N ?? 400), seed: Number(process.env.S ?? 20261129) });
});

void test('agrees with croner on hand-picked expressions people get wrong', () => {
  const cases = [
    '0 0 29 2 *', // leap days only
    '0 12 31 * *', // months with a 31st only
    '0 9 1-7 * 1', // either rule: the first seven days or any Monday
    '0 0 L * *', '0 0 LW * *', '0 0 15W * *', '0 0 * * 5L', '0 0 * * 1#2', '0 0 * * 7',
    '*/20 * * * * *', '30 5/15 * * * *', '0 0 1 JAN,JUL MON-FRI',
  ];
  const afterMs = Date.UTC(2026, 10, 29, 12, 0, 0);
  for (const cron of cases) {
    const ours = oursNext(cron, afterMs);
    assert.ok(ours.length > 0, cron);
    assert.deepEqual(ours, cronerNext(cron, afterMs), cron);
  }
});
