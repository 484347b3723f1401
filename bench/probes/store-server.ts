/**
 * A `tickler serve` process on a store of its own, for the benchmark scripts that measure one
 * server: a fresh data directory and, with `postgres`, a fresh database of the local
 * PostgreSQL (as bench:peers makes), the server started on it with `--node-id <label>`.
 * `close` stops the server and removes both.
 */
import { createFreshDatabase, type FreshDatabase } from '../peers/services.js';
import { makeTempDir, startBenchServer, type BenchServer } from '../server-process.js';

export interface StoreServer {
  server: BenchServer;
  /** The server's data directory (the embedded store's file lives there). */
  dataDir: string;
  /** The fresh PostgreSQL database, with `postgres`. */
  database: FreshDatabase | undefined;
  close(): Promise<void>;
}

/** `store` is a script's `--store` value as given: `sqlite` or `postgres`, anything else refused. */
export async function startStoreServer(store: string, label: string,
  options: { cpuProfileDir?: string | undefined } = {}): Promise<StoreServer> {
  if (store !== 'sqlite' && store !== 'postgres') throw new Error(`--store is sqlite or postgres, got ${store}`);
  const dataDir = makeTempDir(`${label}-`);
  const database = store === 'postgres' ? await createFreshDatabase(label.replace(/-/g, '_')) : undefined;
  const server = await startBenchServer({
    dataDir: dataDir.dir,
    args: database === undefined ? [] : ['--store', database.url, '--node-id', label],
    ...(options.cpuProfileDir === undefined ? {} : { cpuProfileDir: options.cpuProfileDir }),
  });
  return {
    server,
    dataDir: dataDir.dir,
    database,
    close: async () => {
      await server.stop();
      dataDir.remove();
      await database?.drop();
    },
  };
}
