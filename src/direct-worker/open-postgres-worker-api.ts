/**
 * `openPostgresWorkerApi` for the package entry and the CLI, loading the PostgreSQL store (and
 * the server modules it runs on) only when called: an HTTP-only SDK user's import of the
 * package stays ~30 ms instead of ~240 (measured on dist/).
 */
import type { PostgresWorkerApi, PostgresWorkerApiOptions } from './postgres-direct.js';

export async function openPostgresWorkerApi(options: PostgresWorkerApiOptions): Promise<PostgresWorkerApi> {
  const direct = await import('./postgres-direct.js');
  return direct.openPostgresWorkerApi(options);
}
