// `tickler serve` and its port, as a real process: a node that cannot bind its port closes
// what it opened (the data directory's lock too), prints one line naming the address and
// exits 1, instead of living on headless while its clients find whatever else answers there;
// and a node started with TICKLER_TEST_RUN names that run on every answer, so a harness's
// client can tell another run's node from its own.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import net from 'node:net';
import { after, describe, it } from 'node:test';
import { cliPath, repoRoot, startServerProcess, tempDataDir } from './server-process.js';

/** How long a refused node may take to close and exit before the test calls it hung. */
const exitWithinMs = 60_000;

async function holdPort(): Promise<{ port: number; release(): Promise<void> }> {
  const holder = net.createServer();
  holder.listen(0, '127.0.0.1');
  await once(holder, 'listening');
  return {
    port: (holder.address() as net.AddressInfo).port,
    release: () => new Promise((resolve) => holder.close(() => resolve())),
  };
}

/** Runs `tickler serve` with `args`; its exit code and stderr, or `hung` when it was still running after `exitWithinMs`. */
function serveUntilExit(args: string[]): Promise<{ code: number | null; stderr: string; hung: boolean }> {
  const child = spawn(process.execPath, ['--import', 'tsx', cliPath, 'serve', ...args],
    { cwd: repoRoot, env: { ...process.env, TICKLER_LOG_LEVEL: 'warn' }, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
  return new Promise((resolve) => {
    const deadline = setTimeout(() => {
      child.kill('SIGKILL');
      resolve({ code: null, stderr, hung: true });
    }, exitWithinMs);
    child.once('exit', (code) => {
      clearTimeout(deadline);
      resolve({ code, stderr, hung: false });
    });
  });
}

void describe('tickler serve and its port', () => {
  const data = tempDataDir('tickler-serve-port-');
  after(() => data.remove());

  void it('a node whose port is taken exits 1 with one line naming the address, and releases its data directory', async () => {
    const held = await holdPort();
    try {
      const outcome = await serveUntilExit(['--port', String(held.port), '--data-dir', data.dir]);
      assert.equal(outcome.hung, false, `still running ${exitWithinMs} ms after its port was refused:\n${outcome.stderr}`);
      assert.equal(outcome.code, 1);
      assert.equal(outcome.stderr.trim(), `tickler: cannot listen on 127.0.0.1:${held.port}: address already in use (EADDRINUSE)`);
    } finally {
      await held.release();
    }
    // Its lock on the data directory went with it: a node on another port opens the same store.
    const next = await startServerProcess({ dataDir: data.dir });
    assert.equal(await next.stop(), 0);
  });

  void it('a node started with TICKLER_TEST_RUN names the run on every answer, found or not', async () => {
    const node = await startServerProcess({ dataDir: data.dir, env: { TICKLER_TEST_RUN: 'run-a1' } });
    try {
      for (const path of ['/healthz', '/v1/no-such-route']) {
        const response = await fetch(`${node.url}${path}`);
        await response.arrayBuffer();
        assert.equal(response.headers.get('tickler-test-run'), 'run-a1', path);
      }
    } finally {
      await node.stop();
    }
    const untagged = await startServerProcess({ dataDir: data.dir });
    try {
      const response = await fetch(`${untagged.url}/healthz`);
      await response.arrayBuffer();
      assert.equal(response.headers.get('tickler-test-run'), null);
    } finally {
      await untagged.stop();
    }
  });
});
