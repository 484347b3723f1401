// The embedded store against the shared conformance suite, plus what only SQLite has:
// group commit, schema versioning and reopening a file.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openSqliteStore } from '../../src/store/sqlite/index.js';
import { runStoreConformance } from './conformance.js';

async function tempDatabasePath(): Promise<{ path: string; removeDirectory(): Promise<void> }> {
  const directory = await mkdtemp(join(tmpdir(), 'tickler-sqlite-'));
  return { path: join(directory, 'tickler.db'), removeDirectory: () => rm(directory, { recursive: true, force: true }) };
}

runStoreConformance('sqlite', async () => {
  const { path, removeDirectory } = await tempDatabasePath();
  const store = await openSqliteStore({ path });
  const peers: { close(): Promise<void> }[] = [];
  return {
    store,
    openPeer: async () => {
      const peer = await openSqliteStore({ path });
      peers.push(peer);
      return peer;
    },
    cleanup: async () => {
      for (const peer of peers) await peer.close();
      await store.close();
      await removeDirectory();
    },
  };
});
