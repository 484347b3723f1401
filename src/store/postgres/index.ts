export { openPostgresStore, PostgresStore, type PostgresStoreOptions } from './postgres-store.js';
