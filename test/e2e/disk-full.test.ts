// A full disk under a real `tickler serve` on the embedded store: the data directory lives on
// a small tmpfs of its own, filled by a filler file while workers' writes keep coming. While
// full, writes answer 503 in the error shape, reads go on and /readyz says not ready; once
// the filler is gone, writes commit again without a restart, even under a steady load that
// would let the WAL grow back into the freed space; SIGTERM on a full disk exits 0, and a
// restart after space is freed finds everything acknowledged. Mounting needs root (or
// CAP_SYS_ADMIN): elsewhere the test skips, saying why.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { eventually, startServerProcess, type ServerProcess } from './server-process.js';

const tmpfsSize = '8m';
/** Enough successful creates after the disk is freed that their WAL traffic (~25 KB each) is several times the disk. */
const createsAfterFreedMin = 1_000;
const body = JSON.stringify({ schedule: { delay_s: 86_400 }, pool: 'disk', payload: { text: 'x'.repeat(2_000) } });

function mountTmpfs(): { dir: string; skip: string | null; remove(): void } {
  const dir = mkdtempSync(join(tmpdir(), 'tickler-disk-full-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${tmpfsSize}`, 'tmpfs', dir], { stdio: 'pipe' });
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    const reason = error instanceof Error ? error.message.split('\n')[0] : String(error);
    return { dir, skip: `cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): ${reason}`, remove: () => undefined };
  }
  return {
    dir,
    skip: null,
    remove: () => {
      execFileSync('umount', ['-l', dir]);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Writes zeros until the file system refuses; answers the filler's path. */
function fillDisk(dir: string): string {
  const path = join(dir, 'filler');
  const fd = openSync(path, 'w');
  const chunk = Buffer.alloc(64 * 1024);
  try {
    for (;;) writeSync(fd, chunk);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOSPC') throw error;
  } finally {
    closeSync(fd);
  }
  // The last chunk may have been written in part: fill what is left a byte at a time.
  const tail = openSync(path, 'a');
  try {
    for (;;) writeSync(tail, Buffer.alloc(512));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOSPC') throw error;
  } finally {
    closeSync(tail);
  }
  return path;
}

async function create(url: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const response = await fetch(`${url}/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  return { status: response.status, body: await response.json() as Record<string, unknown> };
}

async function readyStatus(url: string): Promise<number> {
  const response = await fetch(`${url}/readyz`);
  await response.arrayBuffer();
  return response.status;
}

/** Concurrent creates until `enough` answers; counts statuses and keeps the ids created. */
async function load(url: string, enough: (counts: Map<number, number>) => boolean, capMs: number):
  Promise<{ counts: Map<number, number>; created: string[] }> {
  const counts = new Map<number, number>();
  const created: string[] = [];
  const deadline = Date.now() + capMs;
  const loop = async (): Promise<void> => {
    while (!enough(counts) && Date.now() < deadline) {
      const answer = await create(url);
      counts.set(answer.status, (counts.get(answer.status) ?? 0) + 1);
      if (answer.status === 201) created.push(String(answer.body['job_id']));
    }
  };
  await Promise.all(Array.from({ length: 8 }, loop));
  return { counts, created };
}

const volume = mountTmpfs();

test('a full disk: 503s and not ready, writes come back once space is freed, SIGTERM exits 0', { skip: volume.skip ?? false }, async () => {
  const dataDir = join(volume.dir, 'data');
  let server: ServerProcess | null = await startServerProcess({ dataDir });
  try {
    const before = await create(server.url);
    assert.equal(before.status, 201);
    const firstJobId = String(before.body['job_id']);

    const filler = fillDisk(volume.dir);
    // Writes under load meet the full disk: each a clean 503, never a 500.
    const full = await load(server.url, (counts) => (counts.get(503) ?? 0) >= 20, 60_000);
    assert.deepEqual([...full.counts.keys()].filter((status) => status !== 201 && status !== 503), [], 'only 201 or 503');
    const refused = await create(server.url);
    assert.equal(refused.status, 503);
    assert.equal((refused.body['error'] as { code: string }).code, 'unavailable');
    assert.equal((await fetch(`${server.url}/v1/jobs/${firstJobId}`)).status, 200, 'reads go on');
    assert.equal(await readyStatus(server.url), 503, '/readyz says not ready while writes cannot commit');

    rmSync(filler);
    // A steady load from the moment space is freed: its WAL traffic alone is several times the
    // disk, so a WAL allowed to grow back into the freed space fills it again for good.
    const freed = await load(server.url, (counts) => (counts.get(201) ?? 0) >= createsAfterFreedMin, 60_000);
    assert.ok((freed.counts.get(201) ?? 0) >= createsAfterFreedMin,
      `writes commit again after space is freed (${JSON.stringify([...freed.counts])})`);
    await eventually(async () => (await readyStatus(server!.url) === 200 ? true : undefined), '/readyz to say ready again', 30_000);
    assert.equal((await create(server.url)).status, 201);
    assert.match(server.stderr(), /the store cannot commit writes/, 'the failing commits were logged');
    assert.match(server.stderr(), /the store commits writes again/, 'and the recovery');

    // Full again, then SIGTERM: shutdown cannot hand back the shard leases, and still exits 0.
    const fillerAgain = fillDisk(volume.dir);
    await eventually(async () => ((await create(server!.url)).status === 503 ? true : undefined), 'a write to be refused', 30_000);
    const code = await server.stop();
    server = null;
    assert.equal(code, 0, 'SIGTERM on a full disk exits 0');

    rmSync(fillerAgain);
    server = await startServerProcess({ dataDir });
    assert.equal((await fetch(`${server.url}/v1/jobs/${firstJobId}`)).status, 200);
    assert.equal((await fetch(`${server.url}/v1/jobs/${freed.created.at(-1)!}`)).status, 200, 'the last acknowledged create survived');
    assert.equal((await create(server.url)).status, 201);
  } finally {
    await server?.kill();
    volume.remove();
  }
});
