/**
 * What the reconciler's two scans cost on a large embedded store: the timer check
 * (`findJobsWithoutTimer`, since the first sessions) and the dead man's switch
 * (`findSilentJobs`), each run once a minute on the event loop by the reconciler.
 *
 *   node --import tsx bench/silence-scan-cost.ts [--jobs 1000000] [--watched 1000]
 *
 * Creates `jobs` recurring jobs (every minute), `watched` of them with `max_silence_s`, then
 * times each scan three times.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { openSqliteStore } from '../src/store/sqlite/index.js';
import { jobRecord, jobSpec, t0Ms, timerAt } from '../test/store/conformance-fixtures.js';

const { values } = parseArgs({ options: { jobs: { type: 'string', default: '1000000' }, watched: { type: 'string', default: '1000' } } });
const jobCount = Number(values.jobs);
const watched = Number(values.watched);
const directory = mkdtempSync(join(tmpdir(), 'tickler-silence-scan-'));
const store = await openSqliteStore({ path: join(directory, 'tickler.db'), synchronous: 'NORMAL' });
try {
  for (let start = 0; start < jobCount; start += 1_000) {
    const items = Array.from({ length: Math.min(1_000, jobCount - start) }, (_, offset) => ({
      job: jobRecord(jobSpec({ max_silence_s: start + offset < watched ? 3_600 : null }), t0Ms),
      timer: timerAt(t0Ms + 60_000),
    }));
    await store.createJobs(items, t0Ms);
  }
  const time = async (name: string, scan: () => Promise<unknown[]>): Promise<void> => {
    for (let round = 1; round <= 3; round++) {
      const startMs = performance.now();
      const found = await scan();
      console.log(`${name}: ${(performance.now() - startMs).toFixed(1)} ms (${found.length} found)`);
    }
  };
  console.log(`${jobCount} active jobs, ${watched} with max_silence_s`);
  await time('findJobsWithoutTimer', () => store.findJobsWithoutTimer(1_000));
  await time('findSilentJobs', () => store.findSilentJobs(null, t0Ms + 2 * 3_600_000, 10_000));
} finally {
  await store.close();
  rmSync(directory, { recursive: true, force: true });
}
