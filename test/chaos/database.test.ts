/**
 * The chaos run's database where no private cluster can be made: a fresh database on the
 * shared server, reachable with no PGUSER or USER in the environment (CI's shell set neither,
 * and the run failed with "no PostgreSQL user name specified in startup packet").
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import pg from 'pg';
import { prepareDatabase } from '../../chaos/database.js';
import { postgresSkipReason } from '../store/postgres-harness.js';

const skip = await postgresSkipReason() ?? false;

void it('with no private cluster and no user in the environment, a fresh database on the shared server answers', { skip },
  async () => {
    const saved = { USER: process.env['USER'], PGUSER: process.env['PGUSER'] };
    delete process.env['USER'];
    delete process.env['PGUSER'];
    const logged: string[] = [];
    const name = `chaos_fallback_${process.pid}`;
    try {
      // No PostgreSQL 99 is installed: making its cluster fails, as any failed start would.
      const database = await prepareDatabase({ name, cluster: { version: '99', name: 'nope', port: 55999 },
        log: (message) => logged.push(message) });
      try {
        assert.equal(database.restart, null);
        assert.match(database.note ?? '', /no private cluster/);
        assert.match(logged.join('\n'), /using the shared server without the restart fault/);
        const client = new pg.Client({ connectionString: database.url });
        await client.connect();
        try {
          const { rows } = await client.query<{ db: string }>('SELECT current_database() AS db');
          assert.equal(rows[0]?.db, name);
        } finally {
          await client.end();
        }
      } finally {
        await database.drop();
      }
    } finally {
      for (const [key, value] of Object.entries(saved)) if (value !== undefined) process.env[key] = value;
    }
  });
