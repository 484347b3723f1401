/**
 * Which B-trees the embedded store's create commits dirty: `--warmup` commits of `--batch`
 * one-shot jobs each (a millisecond apart, as a server's creates are), then `--commits` more,
 * whose WAL frames are read back from the file and named by SQLite's `dbstat` table. A WAL
 * frame is one whole page, written once per commit that changed it, so frames per commit is
 * what a create's fdatasync carries. Prints frames per commit by table or index (leaf and
 * interior pages apart) and the pages of the last commits.
 *
 *   node --import tsx bench/probes/wal-frames.ts [--batch 64] [--commits 50] [--warmup 2000]
 *
 * `--batch 64` is bench:peers W1 one at a time through the coalescing client (a request of 64
 * creates a commit); `--batch 1000` its batches.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import Database from 'better-sqlite3';
import { openSqliteStore } from '../../src/store/sqlite/index.js';
import { jobRecord, jobSpec, t0Ms, timerAt } from '../../test/store/conformance-fixtures.js';

const { values: options } = parseArgs({
  options: {
    batch: { type: 'string', default: '64' },
    commits: { type: 'string', default: '50' },
    warmup: { type: 'string', default: '2000' },
  },
});
const batchSize = Number(options.batch);
const commits = Number(options.commits);

const dir = mkdtempSync(join(tmpdir(), 'wal-frames-'));
const path = join(dir, 'tickler.db');
// No background checkpoint: the WAL keeps every frame the measured commits wrote.
const store = await openSqliteStore({ path, checkpointIntervalMs: 3_600_000 });
let createdAtMs = t0Ms - 100_000_000;
const dueAt = new Date(t0Ms).toISOString();

async function commitOneBatch(): Promise<void> {
  const jobs = Array.from({ length: batchSize }, (_, index) =>
    jobRecord(jobSpec({ schedule: { at: dueAt }, overlap: 'forbid', payload: { index } }), createdAtMs++));
  await store.createJobs(jobs.map((job) => ({ job, timer: timerAt(t0Ms) })), createdAtMs);
}

interface WalFrame { page: number; endsCommit: boolean }

/** The frames of the WAL from byte `from` on (a 32-byte file header, then 24-byte frame headers). */
function walFrames(from: number): { frames: WalFrame[]; pageSize: number } {
  const wal = readFileSync(`${path}-wal`);
  const pageSize = wal.readUInt32BE(8);
  const frames: WalFrame[] = [];
  for (let offset = Math.max(from, 32); offset + 24 + pageSize <= wal.length; offset += 24 + pageSize) {
    frames.push({ page: wal.readUInt32BE(offset), endsCommit: wal.readUInt32BE(offset + 4) !== 0 });
  }
  return { frames, pageSize };
}

try {
  for (let index = 0; index < Number(options.warmup); index++) await commitOneBatch();
  const walBytesBefore = readFileSync(`${path}-wal`).length;
  for (let index = 0; index < commits; index++) await commitOneBatch();
  const { frames, pageSize } = walFrames(walBytesBefore);
  const commitsSeen = frames.filter((frame) => frame.endsCommit).length;
  if (commitsSeen !== commits) throw new Error(`the WAL holds ${commitsSeen} commits, not ${commits}: was it checkpointed?`);

  const reader = new Database(path, { readonly: true });
  const owners = new Map<number, string>();
  for (const row of reader.prepare('SELECT name, pageno, pagetype FROM dbstat').all() as
    { name: string; pageno: number; pagetype: string }[]) {
    owners.set(row.pageno, row.pageno === 1 ? 'page 1 (header, sqlite_schema)' : `${row.name} ${row.pagetype}`);
  }
  reader.close();
  const ownerOf = (page: number): string => owners.get(page) ?? `page ${page} (free)`;

  const perOwner = new Map<string, number>();
  for (const { page } of frames) perOwner.set(ownerOf(page), (perOwner.get(ownerOf(page)) ?? 0) + 1);
  console.log(`${commits} commits of ${batchSize} creates after ${options.warmup}: ${(frames.length / commits).toFixed(1)} ` +
    `frames of ${pageSize} B per commit (${Math.round((frames.length * (pageSize + 24)) / commits / 1024)} KiB)`);
  for (const [owner, count] of [...perOwner].sort((a, b) => b[1] - a[1])) {
    console.log(`${(count / commits).toFixed(2).padStart(7)}  ${owner}`);
  }
  let commit: number[] = [];
  const lastCommits: number[][] = [];
  for (const frame of frames) {
    commit.push(frame.page);
    if (frame.endsCommit) {
      lastCommits.push(commit);
      commit = [];
    }
  }
  for (const pages of lastCommits.slice(-2)) {
    console.log(`a commit: ${pages.map((page) => `${page} ${ownerOf(page)}`).join(', ')}`);
  }
} finally {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
}
