/**
 * The chaos run's database: a private cluster of the run's own where one can be made, so that
 * two runs on one machine never restart each other's server; where none can, a fresh
 * database on the shared server, reachable with no PGUSER or USER in the environment (CI's
 * shell set neither, and the run failed with "no PostgreSQL user name specified in startup
 * packet").
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { it } from 'node:test';
import pg from 'pg';
import { prepareDatabase, sweepDeadRunsClusters } from '../../chaos/database.js';
import { drawFreePort } from '../../chaos/ports.js';
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

/** Why private clusters cannot be made here (pg_createcluster is root's), or false. */
function clusterSkip(): string | false {
  if (process.getuid?.() !== 0) return 'private clusters need root (pg_createcluster)';
  return spawnSync('pg_lsclusters', ['--no-header']).status === 0 ? false : 'no pg_lsclusters here';
}

function clusterPorts(): string[] {
  return spawnSync('pg_lsclusters', ['--no-header'], { encoding: 'utf8' }).stdout.split('\n')
    .map((line) => line.trim().split(/\s+/)[2] ?? '').filter((port) => port !== '');
}

void it('two runs at once get a private cluster each, on ports of their own: a restart of one leaves the other alone; both dropped',
  { skip: skip || clusterSkip() }, async () => {
    const logged: string[] = [];
    const log = (message: string): void => {
      logged.push(message);
    };
    const [first, second] = await Promise.all(['a', 'b'].map((run) => prepareDatabase({ name: `chaos_own_${run}_${process.pid}`, log })));
    const ports = [first!, second!].map((database) => new URL(database.url).port);
    try {
      assert.ok(first!.restart !== null && second!.restart !== null, logged.join('\n'));
      assert.notEqual(ports[0], ports[1]);
      for (const port of ports) assert.ok(clusterPorts().includes(port), `a cluster listens on ${port}`);
      const client = new pg.Client({ connectionString: second!.url });
      await client.connect();
      try {
        await first!.restart();
        const { rows } = await client.query<{ db: string }>('SELECT current_database() AS db');
        assert.equal(rows[0]?.db, `chaos_own_b_${process.pid}`, 'the second run\'s connection outlived the first run\'s restart');
      } finally {
        await client.end();
      }
    } finally {
      await Promise.all([first!.drop(), second!.drop()]);
    }
    for (const port of ports) assert.ok(!clusterPorts().includes(port), `the cluster on ${port} is dropped`);
  });

void it('drops the cluster a run that is gone left behind, and no other', { skip: skip || clusterSkip() }, async () => {
  const gonePid = spawnSync('true').pid;
  const name = `chaos_p${gonePid}_0dead`;
  const port = String(await drawFreePort());
  const made = spawnSync('pg_createcluster', ['15', name, '--port', port, '--', '--auth=trust'], { encoding: 'utf8' });
  assert.equal(made.status, 0, made.stderr);
  try {
    assert.ok(clusterPorts().includes(port));
    const logged: string[] = [];
    await sweepDeadRunsClusters((message) => logged.push(message));
    assert.ok(!clusterPorts().includes(port), logged.join('\n'));
    assert.ok(clusterPorts().includes('5432'), 'the shared server is left alone');
  } finally {
    spawnSync('pg_dropcluster', ['--stop', '15', name]);
  }
});
