// The crontab corpus through `importCrontab` (each line its expected job or refusal), then
// the jobs file through `tickler apply`'s code against a real server on each store: every
// job there as expected, a second apply changing nothing, and --prune cancelling exactly the
// selected jobs the file no longer names.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { importCrontab, splitPercent, type ImportResult, type JobFileSpec } from '../../src/migrate/crontab.js';
import { parseJobsFile, renderJobsFile } from '../../src/migrate/jobs-file.js';
import { runApply } from '../../src/cli/apply-command.js';
import { TicklerClient } from '../../src/worker/client.js';
import { crontabText, entryCount, systemCrontab, userCrontab, type CorpusLine } from './crontab-corpus.js';
import { startHarness, type Harness } from '../api/harness.js';
import { openTestStore, postgresSkipReason, type PostgresHandle } from '../store/postgres-harness.js';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

function checkCorpus(lines: readonly CorpusLine[], result: ImportResult, user: string | null): void {
  let lineNumber = 0;
  const byLine = new Map(result.jobs.map((job) => [job.payload.source['line'], job]));
  const refusedByLine = new Map(result.refused.map((problem) => [problem.line, problem]));
  for (const entry of lines) {
    lineNumber++;
    if ('context' in entry) continue;
    const job = byLine.get(lineNumber);
    if ('refused' in entry) {
      assert.equal(job, undefined, `line ${lineNumber} ${entry.line} must be refused`);
      const problem = refusedByLine.get(lineNumber);
      assert.ok(problem !== undefined, `line ${lineNumber} ${entry.line} is reported`);
      assert.match(problem.reason, entry.refused, `line ${lineNumber}`);
      continue;
    }
    assert.ok(job !== undefined, `line ${lineNumber} ${entry.line} becomes a job (refused: ${refusedByLine.get(lineNumber)?.reason})`);
    const expected = entry.expect;
    assert.deepEqual(job.schedule, { cron: expected.cron, tz: expected.tz }, entry.line);
    const exec = { command: expected.command, ...(expected.shell === undefined ? {} : { shell: expected.shell }),
      ...(expected.stdin === undefined ? {} : { stdin: expected.stdin }), ...(expected.env === undefined ? {} : { env: expected.env }),
      ...(expected.cwd === undefined ? {} : { cwd: expected.cwd }) };
    assert.deepEqual(job.payload.exec, exec, entry.line);
    assert.equal(job.payload.source['user'], expected.user ?? user);
    assert.equal(job.overlap, 'allow');
  }
}

const userOptions = { host: 'web-1', user: 'deploy', tz: 'UTC', pool: 'cron', file: 'deploy.crontab' };
const systemOptions = { host: 'web-1', user: null, tz: 'Europe/Berlin', pool: 'cron', file: '/etc/crontab' };

void describe('crontab import', () => {
  it('reads a corpus of at least 50 entries and context lines as cron does', () => {
    assert.ok(entryCount(userCrontab) + entryCount(systemCrontab) >= 45);
    assert.ok(userCrontab.length + systemCrontab.length >= 50);
    checkCorpus(userCrontab, importCrontab(crontabText(userCrontab), userOptions), 'deploy');
    checkCorpus(systemCrontab, importCrontab(crontabText(systemCrontab), systemOptions), null);
  });

  it('reports MAILTO, an unknown CRON_TZ and the "-" prefix, one line each', () => {
    const result = importCrontab(crontabText(userCrontab), userOptions);
    assert.ok(result.notes.some((note) => /MAILTO=ops@example.com: tickler sends no mail/.test(note.reason)));
    assert.ok(result.refused.some((problem) => /CRON_TZ=Mars\/Olympus is not an IANA time zone/.test(problem.reason)));
    assert.ok(result.notes.some((note) => /leading "-"/.test(note.reason)));
  });

  it('keys jobs deterministically: the same crontab gives the same keys, a repeated command its own, a moved line the same', () => {
    const first = importCrontab(crontabText(userCrontab), userOptions).jobs.map((job) => job.key);
    const again = importCrontab(crontabText(userCrontab), userOptions).jobs.map((job) => job.key);
    assert.deepEqual(again, first);
    assert.equal(new Set(first).size, first.length, 'keys are distinct');
    const reordered = importCrontab(crontabText([...userCrontab].reverse().filter((entry) => !('context' in entry))), userOptions);
    const plain = (job: JobFileSpec): boolean => job.payload.exec.env === undefined;
    const plainKeys = importCrontab(crontabText(userCrontab), userOptions).jobs.filter(plain).map((job) => job.key).sort();
    const reorderedKeys = new Set(reordered.jobs.map((job) => job.key));
    assert.deepEqual(plainKeys.filter((key) => !reorderedKeys.has(key)), [], 'an entry keeps its key wherever it stands');
    const otherHost = importCrontab(crontabText(userCrontab), { ...userOptions, host: 'web-2' }).jobs.map((job) => job.key);
    assert.equal(otherHost.filter((key) => first.includes(key)).length, 0);
  });

  it('splits % as Vixie cron does', () => {
    assert.deepEqual(splitPercent('echo a'), { command: 'echo a', stdin: null });
    assert.deepEqual(splitPercent('cat%x%y'), { command: 'cat', stdin: 'x\ny' });
    assert.deepEqual(splitPercent('date +\\%s%'), { command: 'date +%s', stdin: '' });
    assert.deepEqual(splitPercent('a\\b%c\\d'), { command: 'a\\b', stdin: 'c\\d' });
  });
});

const pgSkip = await postgresSkipReason();

for (const kind of ['sqlite', 'postgres'] as const) {
  void describe(`crontab jobs applied on ${kind}`, { skip: kind === 'postgres' ? (pgSkip ?? false) : false }, () => {
    let h: Harness;
    let pg: PostgresHandle | undefined;
    let client: TicklerClient;
    let dir: string;
    before(async () => {
      if (kind === 'postgres') pg = await openTestStore();
      h = await startHarness(pg === undefined ? {} : { wrapStore: () => pg!.store });
      const address = await h.app.listen({ port: 0, host: '127.0.0.1' });
      client = new TicklerClient({ baseUrl: address });
      dir = mkdtempSync(join(tmpdir(), 'tickler-apply-'));
    });
    after(async () => {
      await h.close();
      await pg?.cleanup();
      rmSync(dir, { recursive: true, force: true });
    });

    const apply = async (jobs: JobFileSpec[], flags: { prune?: boolean; dryRun?: boolean } = {}) => {
      const file = join(dir, `jobs-${Math.random()}.yaml`);
      writeFileSync(file, renderJobsFile('test', jobs, [], []));
      const lines: string[] = [];
      const report = await runApply(client, { file, ...flags, ...(flags.prune === true ? { selector: 'source=crontab' } : {}) },
        (line) => lines.push(line), (line) => lines.push(line));
      return { report, lines };
    };

    it('creates every job as imported, and a second apply changes nothing', async () => {
      const imported = [...importCrontab(crontabText(userCrontab), userOptions).jobs,
        ...importCrontab(crontabText(systemCrontab), systemOptions).jobs];
      const first = await apply(imported);
      assert.deepEqual(first.report.failed, []);
      assert.equal(first.report.created.length, imported.length);
      for (const spec of imported) {
        const [job] = (await client.listJobs({ key: spec.key })).items;
        assert.ok(job !== undefined, spec.key);
        assert.deepEqual(job.schedule, spec.schedule);
        assert.deepEqual(job.payload, spec.payload);
        assert.deepEqual(job.labels, spec.labels);
        assert.equal(job.overlap, 'allow');
      }
      const second = await apply(imported);
      assert.equal(second.report.unchanged.length, imported.length);
      assert.deepEqual([second.report.created, second.report.changed, second.report.cancelled], [[], [], []]);
    });

    it('updates a changed schedule in place and --prune cancels only the selected jobs the file dropped', async () => {
      const imported = importCrontab(crontabText(userCrontab), userOptions).jobs;
      const outsider = await client.createJob({ key: 'not-from-cron', schedule: { cron: '0 1 * * *' }, pool: 'cron' });
      const [dropped, changedSpec, ...rest] = imported;
      const changed = { ...changedSpec!, schedule: { ...changedSpec!.schedule, cron: '7 7 * * *' } };
      const dry = await apply([changed, ...rest], { prune: true, dryRun: true });
      assert.deepEqual(dry.report.changed, [changed.key]);
      assert.ok(dry.lines.some((line) => line.includes('schedule:') && line.includes('7 7 * * *')), dry.lines.join('\n'));
      assert.ok(dry.lines.some((line) => /^ {4}next: .* = 20\d\d-/.test(line)), dry.lines.join('\n'));
      assert.equal((await client.listJobs({ key: dropped!.key })).items[0]!.state, 'active', 'a dry run cancels nothing');
      const pruned = await apply([changed, ...rest], { prune: true });
      assert.deepEqual(pruned.report.changed, [changed.key]);
      assert.ok(pruned.report.cancelled.includes(dropped!.key));
      assert.ok(!pruned.report.cancelled.includes('not-from-cron'));
      assert.equal((await client.listJobs({ key: dropped!.key })).items[0]!.state, 'cancelled');
      assert.equal((await client.getJob(outsider.job_id)).state, 'active');
      const [updated] = (await client.listJobs({ key: changed.key })).items;
      assert.deepEqual(updated!.schedule, changed.schedule);
      const again = await apply([changed, ...rest], { prune: true });
      assert.deepEqual([again.report.changed, again.report.created, again.report.cancelled], [[], [], []]);
    });

    it('reads the jobs file back as JSON too', () => {
      const jobs = importCrontab('0 1 * * * /bin/true\n', userOptions).jobs;
      assert.deepEqual(parseJobsFile(JSON.stringify(jobs), 'x.json'), jobs);
      assert.deepEqual(parseJobsFile(renderJobsFile('t', jobs, [], []), 'x.yaml'), jobs);
    });
  });
}
