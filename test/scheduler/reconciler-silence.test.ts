// The reconciler's dead man's switch pass against a real SQLite file on the virtual clock:
// `tickler_jobs_silent` per team, and one warning when a job falls silent (not one per pass),
// one note when it is no longer silent.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { it } from 'node:test';
import { VirtualClock } from '../../src/clock.js';
import type { Logger } from '../../src/obs/log.js';
import { Metrics } from '../../src/obs/metrics.js';
import { Reconciler } from '../../src/scheduler/reconciler.js';
import { ScheduleCache } from '../../src/scheduler/schedule-cache.js';
import { openSqliteStore } from '../../src/store/sqlite/index.js';
import { createJob, t0Ms } from '../store/conformance-fixtures.js';

const hourMs = 3_600_000;

/** A logger that keeps what was said at warn and info. */
function recordingLogger(): { logger: Logger; lines: { level: string; message: string; jobId: unknown }[] } {
  const lines: { level: string; message: string; jobId: unknown }[] = [];
  const at = (level: string) => (details: { jobId?: unknown }, message: string): void => {
    lines.push({ level, message, jobId: details.jobId });
  };
  const logger = { warn: at('warn'), info: at('info'), error: at('error'), debug: () => undefined } as unknown as Logger;
  return { logger, lines };
}

it('counts silent jobs per team and logs each once as it falls silent and once as it recovers', async () => {
  const directory = await mkdtemp(join(tmpdir(), 'tickler-silence-'));
  const store = await openSqliteStore({ path: join(directory, 'tickler.db') });
  try {
    const clock = new VirtualClock(t0Ms);
    const metrics = new Metrics();
    const { logger, lines } = recordingLogger();
    const reconciler = new Reconciler({ store, clock, metrics, logger, schedules: new ScheduleCache(), intervalMs: 60_000,
      isLeader: () => true });
    const a1 = await createJob(store, { spec: { max_silence_s: 3_600 } });
    const a2 = await createJob(store, { spec: { max_silence_s: 3_600 } });
    const b1 = await createJob(store, { spec: { max_silence_s: 3_600 }, team: 'team-b' });
    await createJob(store, { spec: { max_silence_s: null } });
    const gauge = async (): Promise<Record<string, number>> => Object.fromEntries(
      (await metrics.jobsSilent.get()).values.map((value) => [String(value.labels.team), value.value]));

    assert.deepEqual(await reconciler.watchSilenceOnce(), []);
    assert.deepEqual(await gauge(), {});

    await clock.advance(hourMs);
    assert.equal((await reconciler.watchSilenceOnce()).length, 3);
    assert.deepEqual(await gauge(), { 'team-a': 2, 'team-b': 1 });
    await reconciler.watchSilenceOnce();
    const warned = lines.filter((line) => line.level === 'warn');
    assert.deepEqual(warned.map((line) => line.jobId).sort(), [a1.jobId, a2.jobId, b1.jobId].sort(), 'once per job, not per pass');
    assert.ok(warned.every((line) => line.message === 'job has not succeeded within its max_silence_s'));

    await store.cancelJob(null, b1.jobId, clock.nowMs());
    await reconciler.watchSilenceOnce();
    assert.deepEqual(await gauge(), { 'team-a': 2 }, 'a team with none left drops out of the gauge');
    assert.deepEqual(lines.filter((line) => line.level === 'info').map((line) => line.jobId), [b1.jobId]);
  } finally {
    await store.close();
    await rm(directory, { recursive: true, force: true });
  }
});
