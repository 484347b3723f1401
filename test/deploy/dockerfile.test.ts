// The Dockerfile, with no container engine on these machines: linted (multi-stage, npm ci
// from the lock, no development dependencies in the final stage, a non-root USER, a
// HEALTHCHECK on /readyz, exec-form entry point), then its build steps run outside a
// container: the files it COPYs into a temporary /app, its RUN commands there, the final
// stage's COPY --from, and its ENTRYPOINT + CMD started with its ENV, until its own HEALTHCHECK
// command passes. One step is substituted: `npm rebuild better-sqlite3` compiles the native
// addon (over a minute here, where no prebuilt one can be downloaded), so the addon the
// repository's own install compiled for the same version is copied in its place.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { after, test } from 'node:test';
import { cleanEnvironment, run, whenListening } from '../package/npm.js';

const repoRoot = resolve(import.meta.dirname, '..', '..');

interface Instruction {
  keyword: string;
  args: string;
}

interface Stage {
  image: string;
  name: string | null;
  instructions: Instruction[];
}

/** Instructions with their continuation lines joined, comments dropped, grouped by FROM. */
function parseDockerfile(text: string): Stage[] {
  const logical = text.replace(/\\\n/g, ' ').split('\n').map((line) => line.trim()).filter((line) => line !== '' && !line.startsWith('#'));
  const stages: Stage[] = [];
  for (const line of logical) {
    const [, keyword = '', args = ''] = /^(\S+)\s*(.*)$/.exec(line) ?? [];
    if (keyword.toUpperCase() === 'FROM') {
      const [, image = '', name = null] = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(args) ?? [];
      stages.push({ image, name, instructions: [] });
    } else {
      assert.ok(stages.length > 0, `${keyword} before any FROM`);
      stages.at(-1)!.instructions.push({ keyword: keyword.toUpperCase(), args: args.replace(/\s+/g, ' ') });
    }
  }
  return stages;
}

const stages = parseDockerfile(readFileSync(join(repoRoot, 'Dockerfile'), 'utf8'));
const final = stages.at(-1)!;
const all = (stage: Stage, keyword: string): Instruction[] => stage.instructions.filter((instruction) => instruction.keyword === keyword);
const commandsOf = (stage: Stage): string[] => all(stage, 'RUN').flatMap((instruction) => instruction.args.split(' && ').map((part) => part.trim()));
const copiedFrom = (instruction: Instruction): string | null => /--from=(\S+)/.exec(instruction.args)?.[1] ?? null;

/** ENV lines as a map: `ENV A=1 B=2` (the form this Dockerfile uses). */
function environmentOf(stage: Stage): Record<string, string> {
  const environment: Record<string, string> = {};
  for (const instruction of all(stage, 'ENV')) {
    for (const pair of instruction.args.split(' ')) {
      const [name, value] = pair.split('=');
      assert.ok(name !== undefined && value !== undefined, `ENV ${instruction.args}: use NAME=value pairs`);
      environment[name] = value;
    }
  }
  return environment;
}

test('the Dockerfile is multi-stage: built in one stage, run from a slim one', () => {
  assert.ok(stages.length >= 2, 'one stage builds, another runs');
  assert.match(final.image, /-slim$/);
  for (const stage of stages) assert.doesNotMatch(stage.image, /:latest$|^[^:]+$/, `${stage.image}: pin the base image`);
});

test('it installs exactly the lock with npm ci and leaves no development dependency in the final stage', () => {
  const build = stages.find((stage) => stage.name === copiedFrom(all(final, 'COPY').find((copy) => copy.args.includes('node_modules'))!));
  assert.ok(build !== undefined, 'the final stage copies node_modules from a named stage');
  assert.ok(all(build, 'COPY').some((copy) => copy.args.split(' ').includes('package-lock.json')), 'the lock goes in');
  const commands = commandsOf(build);
  const installs = commands.filter((command) => /^npm (ci|install|i)\b/.test(command));
  assert.ok(installs.length > 0 && installs.every((command) => command.startsWith('npm ci')), `npm ci, not npm install: ${installs.join('; ')}`);
  const lastInstall = commands.lastIndexOf(installs.at(-1)!);
  const prune = commands.findIndex((command) => command.startsWith('npm prune --omit=dev'));
  assert.ok(prune > lastInstall, 'npm prune --omit=dev after the last install');
  assert.ok(commands.some((command) => command === 'npm run build'), 'the strict build runs');
  assert.deepEqual(all(final, 'RUN').filter((instruction) => /\bnpm\b/.test(instruction.args)), [], 'nothing installed in the final stage');
});

test('it runs as a non-root user, checks /readyz, and starts in exec form', () => {
  const users = all(final, 'USER');
  assert.equal(users.length, 1);
  assert.doesNotMatch(users[0]!.args, /^(root|0)(:|$)/);
  const indexOf = (keyword: string): number => final.instructions.findIndex((instruction) => instruction.keyword === keyword);
  assert.ok(indexOf('USER') < indexOf('ENTRYPOINT'), 'USER before ENTRYPOINT');
  const [healthcheck] = all(final, 'HEALTHCHECK');
  assert.match(healthcheck?.args ?? '', /CMD \[.*\/readyz/);
  for (const keyword of ['ENTRYPOINT', 'CMD']) assert.ok(Array.isArray(JSON.parse(all(final, keyword)[0]!.args)), `${keyword} in exec form`);
});

const work = mkdtempSync(join(tmpdir(), 'tickler-docker-'));
after(() => rmSync(work, { recursive: true, force: true }));

/** A path of the image under `root`: /app/x → root/app/x; relative ones from the stage's WORKDIR. */
function inImage(root: string, workdir: string, path: string): string {
  return join(root, path.startsWith('/') ? path : join(workdir, path));
}

/** COPY's rule: a destination ending in "/" (or ".") is a folder to copy into; otherwise the copy's own name. */
function copyInto(source: string, destination: string): void {
  const target = /(\/|\/\.)$/.test(destination) ? join(destination, basename(source)) : destination;
  mkdirSync(dirname(target), { recursive: true });
  cpSync(source, target, { recursive: true });
}

function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address !== null ? resolvePort(address.port) : reject(new Error('no port'))));
    });
  });
}

test('its build steps, run outside a container, give an image whose server passes its own HEALTHCHECK', async () => {
  const [build] = stages;
  const buildRoot = join(work, 'build');
  const buildDir = all(build!, 'WORKDIR')[0]!.args;
  for (const copy of all(build!, 'COPY')) {
    const parts = copy.args.split(' ');
    for (const source of parts.slice(0, -1)) copyInto(join(repoRoot, source), inImage(buildRoot, buildDir, parts.at(-1)!));
  }
  const npmEnvironment = cleanEnvironment({ ...environmentOf(build!), npm_config_prefer_offline: 'true' });
  for (const command of commandsOf(build!)) {
    if (command === 'npm rebuild better-sqlite3') {
      const addon = join('node_modules', 'better-sqlite3', 'build', 'Release', 'better_sqlite3.node');
      mkdirSync(dirname(join(buildRoot, buildDir, addon)), { recursive: true });
      cpSync(join(repoRoot, addon), join(buildRoot, buildDir, addon));
      continue;
    }
    run('sh', ['-c', command], join(buildRoot, buildDir), npmEnvironment);
  }
  const finalRoot = join(work, 'final');
  const finalDir = all(final, 'WORKDIR')[0]!.args;
  for (const copy of all(final, 'COPY')) {
    const [source, destination] = copy.args.split(' ').filter((part) => !part.startsWith('--'));
    copyInto(inImage(buildRoot, buildDir, source!), inImage(finalRoot, finalDir, destination!));
  }
  const { devDependencies } = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as { devDependencies: Record<string, string> };
  const left = Object.keys(devDependencies).filter((name) => existsSync(join(finalRoot, finalDir, 'node_modules', name)));
  assert.deepEqual(left, [], 'development dependencies in the final stage');
  // The final stage's RUN only prepares the data volume, which here is a temporary folder.
  for (const command of commandsOf(final)) assert.match(command, /^(mkdir -p|chown \S+) \/data$/);

  const port = await freePort();
  const environment = {
    PATH: process.env['PATH'] ?? '', ...environmentOf(final), TICKLER_PORT: String(port), TICKLER_DATA_DIR: join(work, 'data'),
    TICKLER_API_KEYS: 'demo=deploy-test-key',
  };
  mkdirSync(environment.TICKLER_DATA_DIR);
  const [program, ...args] = [...JSON.parse(all(final, 'ENTRYPOINT')[0]!.args) as string[], ...JSON.parse(all(final, 'CMD')[0]!.args) as string[]];
  const server = spawn(program === 'node' ? process.execPath : program!, args, {
    cwd: join(finalRoot, finalDir), env: environment, stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  server.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
  const exited = new Promise<number | null>((resolveExit) => server.on('exit', (code) => resolveExit(code)));
  try {
    await whenListening(server, exited, () => stderr);
    const healthcheck = JSON.parse(/CMD (\[.*\])$/.exec(all(final, 'HEALTHCHECK')[0]!.args)![1]!) as string[];
    const checked = spawnSync(healthcheck[0] === 'node' ? process.execPath : healthcheck[0]!, healthcheck.slice(1), { env: environment, timeout: 30_000 });
    assert.equal(checked.status, 0, `HEALTHCHECK failed: ${checked.stderr}`);
    const created = await fetch(`http://127.0.0.1:${port}/v1/jobs`, {
      method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer deploy-test-key' },
      body: JSON.stringify({ schedule: { delay_s: 60 }, pool: 'deploy' }),
    });
    assert.equal(created.status, 201, await created.text());
  } finally {
    server.kill('SIGTERM');
    assert.equal(await exited, 0, stderr);
  }
});
