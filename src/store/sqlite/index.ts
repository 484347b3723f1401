/** The embedded SQLite store: open it with `openSqliteStore`. */
export { openSqliteStore, SqliteStore, type SqliteStoreOptions } from './sqlite-store.js';
