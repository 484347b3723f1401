/**
 * What the reconciler's two scans cost on a large embedded store: the timer check
 * (`findJobsWithoutTimer`) and the dead man's switch
 * (`findSilentJobs`), each run once a minute on the event loop by the reconciler.
 *
 *   node --import tsx bench/probes/silence-scan-cost.ts [--jobs 1000000] [--watched 1000]
 *
 * Creates `jobs` recurring jobs (every minute), `watched` of them with `max_silence_s`, then
 * times each scan three times: its whole time, and the longest the event loop was held
 * (perf_hooks' event-loop delay, 1 ms resolution), which is what a timer due meanwhile waits.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { openSqliteStore } from '../../src/store/sqlite/index.js';
import { jobRecord, jobSpec, t0Ms, timerAt } from '../../test/store/conformance-fixtures.js';

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
      const delay = monitorEventLoopDelay({ resolution: 1 });
      delay.enable();
      // A turn first: the monitor counts from its first tick, not from enable().
      await new Promise((resolve) => setTimeout(resolve, 5));
      const startMs = performance.now();
      const found = await scan();
      const elapsedMs = performance.now() - startMs;
      // One more turn, so that a block at the very end is recorded too.
      await new Promise((resolve) => setTimeout(resolve, 5));
      delay.disable();
      console.log(`${name}: ${elapsedMs.toFixed(1)} ms, loop held at most ${(delay.max / 1e6).toFixed(1)} ms ` +
        `(${found.length} found)`);
    }
  };
  console.log(`${jobCount} active jobs, ${watched} with max_silence_s`);
  await time('findJobsWithoutTimer', () => store.findJobsWithoutTimer(1_000));
  await time('findSilentJobs', () => store.findSilentJobs(null, t0Ms + 2 * 3_600_000, 10_000));
} finally {
  await store.close();
  rmSync(directory, { recursive: true, force: true });
}
