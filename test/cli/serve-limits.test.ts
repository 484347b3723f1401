// `tickler serve --limits FILE` (docs/API.md "Team limits"): the file read into entries, every
// fault in it a FatalError of one line naming the file and what is wrong, and a real process
// given a bad file exiting 1 with that line before it listens; a good file is in force from
// the first request.
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { FatalError } from '../../src/fatal-error.js';
import { resolveServeOptions } from '../../src/cli/serve-options.js';
import { runCli, startServerProcess, tempDataDir } from '../e2e/server-process.js';

const files: Record<string, string> = {
  'limits.json': '{"default": {"create_per_s": 100, "pending_max": 100000}, "team-a": {"create_per_s": 2.5, "weight": 4, "dispatch_per_s": null}}',
};
const read = (path: string): string => {
  const text = files[path];
  if (text === undefined) throw new Error(`ENOENT: no such file ${path}`);
  return text;
};
const fatal = (pattern: RegExp) => (error: unknown): boolean => error instanceof FatalError && pattern.test(error.message);

test('--limits FILE (or TICKLER_LIMITS) is read into entries, the default one included; without it there are none', () => {
  assert.deepEqual(resolveServeOptions({ limits: 'limits.json' }, {}, read).teamLimits, [
    { team: 'default', createPerS: 100, pendingMax: 100_000, dispatchPerS: null, weight: 1 },
    { team: 'team-a', createPerS: 2.5, pendingMax: null, dispatchPerS: null, weight: 4 },
  ]);
  assert.equal(resolveServeOptions({}, { TICKLER_LIMITS: 'limits.json' }, read).teamLimits?.length, 2);
  assert.equal(resolveServeOptions({}, {}, read).teamLimits, undefined);
});

test('a bad limits file is a FatalError naming the file and the fault', () => {
  const cases: [string, RegExp][] = [
    ['{"default": ', /--limits bad\.json is not valid JSON/],
    ['[1]', /must hold a JSON object of team/],
    ['{"team a": {}}', /bad team name "team a"/],
    ['{"team-a": 5}', /team-a must be an object/],
    ['{"team-a": {"create_per_s": 0}}', /team-a\.create_per_s must be a number above 0/],
    ['{"default": {"pending_max": 2.5}}', /default\.pending_max must be an integer/],
    ['{"team-a": {"weight": -1}}', /team-a\.weight must be a number above 0/],
    ['{"team-a": {"burst": 10}}', /team-a\.burst is not a known field/],
  ];
  for (const [text, pattern] of cases) {
    assert.throws(() => resolveServeOptions({ limits: 'bad.json' }, {}, () => text), fatal(pattern), text);
  }
  assert.throws(() => resolveServeOptions({ limits: 'missing.json' }, {}, read), fatal(/cannot read the --limits file missing\.json/));
});

test('a real serve given a bad limits file exits 1 with one line, before it listens', async () => {
  const data = tempDataDir();
  try {
    const path = join(data.dir, 'limits.json');
    writeFileSync(path, '{"team-a": {"create_per_s": "fast"}}');
    const outcome = await runCli(['serve', '--port', '0', '--data-dir', data.dir, '--limits', path], {}, undefined, 60_000);
    assert.equal(outcome.code, 1);
    assert.equal(outcome.stdout, '', 'it never listened');
    const lines = outcome.stderr.trimEnd().split('\n');
    assert.equal(lines.length, 1, outcome.stderr);
    assert.match(lines[0]!, /^tickler: --limits \S+limits\.json: team-a\.create_per_s must be a number above 0/);
  } finally {
    data.remove();
  }
});

test('a real serve with a limits file holds a team to it from its first request', async () => {
  const data = tempDataDir();
  const path = join(data.dir, 'limits.json');
  writeFileSync(path, '{"default": {"create_per_s": 1}}');
  const server = await startServerProcess({ dataDir: data.dir, args: ['--limits', path, '--virtual-clock'] });
  try {
    const create = () => fetch(`${server.url}/v1/jobs`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ schedule: { delay_s: 60 }, pool: 'p', payload: {} }),
    });
    assert.equal((await create()).status, 201);
    const refused = await create();
    assert.equal(refused.status, 429);
    assert.equal(refused.headers.get('retry-after'), '1');
    const limits = await (await fetch(`${server.url}/v1/teams/default/limits`)).json() as { create_per_s: number };
    assert.equal(limits.create_per_s, 1);
  } finally {
    assert.equal(await server.stop(), 0);
    data.remove();
  }
});
