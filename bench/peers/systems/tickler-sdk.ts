/**
 * The tickler SDK as bench:peers drives it: from dist/, the build `npm run bench:peers` makes
 * first and the server it starts runs, whenever that build is fresh (bin/build-fresh.js);
 * otherwise from the sources, through tsx.
 *
 * The peers' packages are compiled JavaScript; so is dist/ (tsc). The sources through tsx are
 * not quite the same program: tsx compiles with esbuild's `keepNames`, whose `__name()` defines
 * `name` on every named closure as it is made, which costs a call and a 256-byte property table
 * each (a heap snapshot of a worker holding 15,900 runs: 5.6 MB of its 36).
 */
import { buildIsFresh } from '../../../bin/build-fresh.js';
import type * as ClientModule from '../../../src/worker/client.js';
import type * as WorkerModule from '../../../src/worker/worker.js';
import type * as DirectModule from '../../../src/direct-worker/postgres-direct.js';

const fromDist = buildIsFresh();

async function load<T>(name: string, folder = 'worker'): Promise<T> {
  const url = new URL(`../../../${fromDist ? 'dist' : 'src'}/${folder}/${name}.js`, import.meta.url);
  return await import(url.href) as T;
}

export const { TicklerClient } = await load<typeof ClientModule>('client');
export type TicklerClient = ClientModule.TicklerClient;
export const { createWorker } = await load<typeof WorkerModule>('worker');
export const { openPostgresWorkerApi } = await load<typeof DirectModule>('postgres-direct', 'direct-worker');
export type PostgresWorkerApi = DirectModule.PostgresWorkerApi;
/** Where the SDK came from, for the report's settings. */
export const sdkOrigin = fromDist ? 'the SDK from dist/ (tsc), as the server' : 'the SDK from src/ through tsx (dist/ was stale)';
