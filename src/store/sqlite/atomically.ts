import type Database from 'better-sqlite3';

/**
 * Runs `body` all or nothing. Inside the group commit's transaction (every store write runs
 * there) it runs as it is: the group wraps each operation in a savepoint of its own, or, for
 * a group of one, in the transaction itself, so a second savepoint per operation would only
 * cost (a `db.transaction` wrapper built per call and its SAVEPOINT/RELEASE were 10 % of a
 * completion). Outside one (a test driving a writer directly) it opens an immediate transaction.
 */
export function atomically<T>(db: Database.Database, body: () => T): T {
  return db.inTransaction ? body() : db.transaction(body).immediate();
}
