// Invariant 5 at the store: an acknowledged create, cancel or completion survives kill -9.
// A child process writes through the SQLite store and prints "ACK ..." after each resolved
// promise; it is killed with SIGKILL mid-stream, and the reopened file must hold every
// acknowledged change.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { openSqliteStore } from '../../src/store/sqlite/index.js';

const childScript = fileURLToPath(new URL('./durability-child.ts', import.meta.url));
/** Enough acknowledgements that the kill lands among commits in flight, not before them. */
const acksBeforeKill = 600;

void it('keeps every acknowledged create, cancel and completion after SIGKILL', { timeout: 120_000 }, async () => {
  const directory = await mkdtemp(join(tmpdir(), 'tickler-durability-'));
  const path = join(directory, 'tickler.db');
  try {
    const child = spawn(process.execPath, ['--import', 'tsx', childScript, path], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
    const acked = { create: new Set<string>(), cancel: new Set<string>(), complete: new Set<string>() };
    let ackCount = 0;
    const lines = createInterface({ input: child.stdout });
    const exited = once(child, 'exit');
    for await (const line of lines) {
      const [word, kind, id] = line.split(' ');
      if (word !== 'ACK' || id === undefined || !(kind === 'create' || kind === 'cancel' || kind === 'complete')) {
        assert.fail(`unexpected child output: ${line}`);
      }
      acked[kind].add(id);
      if (++ackCount === acksBeforeKill) child.kill('SIGKILL');
    }
    const [code, signal] = await exited;
    assert.equal(signal, 'SIGKILL', `the child died on its own (code ${String(code)}): ${stderr}`);
    assert.ok(acked.cancel.size > 0 && acked.complete.size > 0, 'every kind of write was acknowledged');

    const store = await openSqliteStore({ path });
    try {
      for (const jobId of acked.create) {
        const job = await store.getJob(null, jobId);
        assert.ok(job !== null, `acknowledged create of ${jobId} survived`);
        if (acked.cancel.has(jobId)) assert.equal(job.state, 'cancelled', `acknowledged cancel of ${jobId} survived`);
      }
      for (const runId of acked.complete) {
        assert.equal((await store.getRun(null, runId))?.status, 'succeeded', `acknowledged completion of ${runId}`);
      }
    } finally {
      await store.close();
    }
  } finally {
    await rm(directory, { recursive: true, force: true });
  }
});
