// The migration commands as real processes against a real `tickler serve --virtual-clock`:
// `import crontab` prints a jobs file, `apply -f -` reads it from stdin (twice: the second
// changes nothing), runs are worked off as time advances, one run row is then deleted from
// the SQLite file, and `verify` finds exactly that occurrence missing, in the ledger and
// against the old host's cron log.
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import Database from 'better-sqlite3';
import { TicklerClient } from '../../src/worker/client.js';
import { runCli, startServerProcess, tempDataDir, type ServerProcess } from '../e2e/server-process.js';

const startAt = '2026-03-01T00:00:00.000Z';
const data = tempDataDir('tickler-migrate-');
let server: ServerProcess;
let client: TicklerClient;

before(async () => {
  server = await startServerProcess({ dataDir: data.dir, args: ['--virtual-clock', '--start-at', startAt] });
  client = new TicklerClient({ baseUrl: server.url });
});
after(async () => {
  await server.stop();
  data.remove();
});

const crontab = `MAILTO=ops@example.com
*/10 * * * * /usr/local/bin/tick --fast
@reboot /usr/local/bin/warm
`;

test('import, apply twice, run, lose a run, verify finds it', async () => {
  const crontabFile = join(data.dir, 'deploy.crontab');
  writeFileSync(crontabFile, crontab);
  const imported = await runCli(['import', 'crontab', crontabFile, '--user', 'deploy', '--tz', 'UTC', '--host', 'web-1']);
  assert.equal(imported.code, 0, imported.stderr);
  assert.match(imported.stderr, /line 3: refused: @reboot/);
  assert.match(imported.stderr, /line 1: note: MAILTO=ops@example.com/);
  assert.match(imported.stdout, /# REFUSED line 3/);

  const env = { TICKLER_URL: server.url };
  const applied = await runCli(['apply', '-f', '-'], env, imported.stdout);
  assert.equal(applied.code, 0, applied.stderr);
  assert.match(applied.stdout, /^created crontab:web-1:deploy:[0-9a-f]{12}$/m);
  assert.match(applied.stdout, /1 created, 0 changed, 0 unchanged, 0 cancelled, 0 failed/);
  const again = await runCli(['apply', '-f', '-'], env, imported.stdout);
  assert.match(again.stdout, /0 created, 0 changed, 1 unchanged, 0 cancelled, 0 failed/);

  // Six occurrences, 00:10 to 01:00, each leased and completed when it fires: fire times are
  // jittered within the tolerance, so time moves a minute at a time, up to 5 minutes past 01:00.
  let completed = 0;
  for (let minute = 0; minute < 65 && completed < 6; minute++) {
    await client.advanceClock(60);
    for (const run of (await client.leaseRuns({ pool: 'cron', max: 10, wait_s: 0, worker_id: 'test' })).runs) {
      await client.completeRun(run.run_id, { fencing_token: run.fencing_token, status: 'succeeded' });
      completed++;
    }
  }
  assert.equal(completed, 6);
  const window = ['--since', startAt, '--until', '2026-03-01T01:00:01.000Z'];
  const clean = await runCli(['verify', ...window, '--selector', 'source=crontab'], env);
  assert.equal(clean.code, 0, clean.stdout + clean.stderr);
  assert.match(clean.stdout, /0 missing, 0 late, 0 extra, 0 pending, 0 run by old cron only/);

  const [job] = (await client.listJobs({ key: /created (\S+)/.exec(applied.stdout)![1]! })).items;
  const runId = (await client.listJobRuns(job!.job_id, { since: '2026-03-01T00:30:00.000Z', until: '2026-03-01T00:30:00.001Z' })).items[0]!.run_id;
  const db = new Database(join(data.dir, 'tickler.db'));
  try {
    db.prepare('DELETE FROM run_events WHERE run_seq = (SELECT run_seq FROM runs WHERE run_id = ?)').run(runId);
    assert.equal(db.prepare('DELETE FROM runs WHERE run_id = ?').run(runId).changes, 1);
  } finally {
    db.close();
  }
  const cronLog = join(data.dir, 'syslog');
  const lines = ['00:10', '00:20', '00:30', '00:40', '00:50', '01:00']
    .map((time) => `Mar  1 ${time}:01 web-1 CRON[${time.replace(':', '')}]: (deploy) CMD (/usr/local/bin/tick --fast)`);
  lines.push('Mar  1 00:35:01 web-1 CROND[99]: (root) CMD (/usr/sbin/not-imported)', 'Mar  1 00:36:01 web-1 sshd[7]: unrelated');
  writeFileSync(cronLog, `${lines.join('\n')}\n`);
  const verified = await runCli(['verify', ...window, '--selector', 'source=crontab', '--cron-log', cronLog, '--log-tz', 'UTC'], env);
  assert.equal(verified.code, 1, verified.stderr);
  assert.match(verified.stdout, new RegExp(`^missing ${job!.key} 2026-03-01T00:30:00.000Z no run in the ledger$`, 'm'));
  assert.match(verified.stdout, new RegExp(`^cron_only ${job!.key} 2026-03-01T00:30:01.000Z .*old cron ran it, tickler did not$`, 'm'));
  assert.match(verified.stdout, /^cron_only \(root\) \/usr\/sbin\/not-imported 2026-03-01T00:35:01.000Z .*no job runs this command$/m);
  assert.match(verified.stdout, /1 missing, 0 late, 0 extra, 0 pending, 2 run by old cron only/);
});
