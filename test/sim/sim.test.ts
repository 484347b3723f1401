// The deterministic simulation (sim/): tickler's real scheduler, services and SQLite store,
// several nodes and workers, faults from the seed, every invariant checked after every step.
// These seeds must pass; the same seed must give the same history byte for byte; and with a
// deliberately broken store switched on, the simulator must find a violation.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { replayCommand, runSeed, type SimOptions } from '../../sim/simulation.js';
import type { Bug } from '../../sim/stores.js';

/** Seeds this file runs; `npm run sim -- --seeds 10000` runs many more. */
const seedCount = 50;
const steps = 40;

async function assertPasses(options: SimOptions): Promise<void> {
  const result = await runSeed(options);
  assert.deepEqual(result.violations, [], `seed ${options.seed} broke an invariant; replay: ${replayCommand(options)}`);
}

test(`${seedCount} seeded histories with faults break no invariant`, async () => {
  for (let seed = 1; seed <= seedCount; seed++) await assertPasses({ seed, steps });
});

test('the same seed gives the same history, byte for byte', async () => {
  const first = await runSeed({ seed: 4242, steps: 80 });
  const second = await runSeed({ seed: 4242, steps: 80 });
  assert.ok(first.history.length > 100, 'a history worth comparing');
  assert.ok(first.history.some((line) => line.includes(' dispatch ')), 'it records the scheduler\'s dispatches');
  assert.equal(second.history.join('\n'), first.history.join('\n'));
  const other = await runSeed({ seed: 4243, steps: 80 });
  assert.notEqual(other.history.join('\n'), first.history.join('\n'), 'another seed, another history');
});

/** Runs seeds from 1 until one breaks an invariant; answers that seed, or null within `seedMax`. */
async function firstFailingSeed(bug: Bug, seedMax: number): Promise<number | null> {
  for (let seed = 1; seed <= seedMax; seed++) {
    const options: SimOptions = { seed, steps: 60, bug };
    const result = await runSeed(options);
    if (result.violations.length > 0) {
      console.log(`broken ${bug}: seed ${seed} found it: ${result.violations[0]}\n  replay: ${replayCommand(options)}`);
      return seed;
    }
  }
  return null;
}

test('with the shard-token fence broken, the simulator finds a stale dispatch accepted', async () => {
  assert.notEqual(await firstFailingSeed('fence', 60), null, 'no violation within 60 seeds');
});

test('with the next-timer write skipped, the simulator finds occurrences that never ran', async () => {
  assert.notEqual(await firstFailingSeed('next-timer', 10), null, 'no violation within 10 seeds');
});

test('the kept seeds replay as they are expected to', async () => {
  const fixtures = JSON.parse(readFileSync(new URL('../../sim/fixtures/seeds.json', import.meta.url), 'utf8')) as {
    seeds: { seed: number; steps: number; bug?: Bug; expect: 'pass' | 'violation' }[];
  };
  for (const fixture of fixtures.seeds) {
    const options: SimOptions = { seed: fixture.seed, steps: fixture.steps, ...(fixture.bug === undefined ? {} : { bug: fixture.bug }) };
    const result = await runSeed(options);
    if (fixture.expect === 'pass') assert.deepEqual(result.violations, [], replayCommand(options));
    else assert.ok(result.violations.length > 0, `${replayCommand(options)} should find a violation`);
  }
});
