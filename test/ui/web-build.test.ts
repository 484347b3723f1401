// web/dist is committed (a production install has no Vite to build it), so it must be what
// the sources build to: this builds web/ afresh into a temp folder and compares every file.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { build } from 'vite';

const root = resolve(import.meta.dirname, '..', '..');

function files(dir: string, prefix = ''): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => (entry.isDirectory()
    ? files(join(dir, entry.name), `${prefix}${entry.name}/`) : [`${prefix}${entry.name}`])).sort();
}

test('web/dist is the build of web/src (run `npm run build:web` and commit web/dist if not)', async () => {
  const out = mkdtempSync(join(tmpdir(), 'tickler-web-'));
  try {
    await build({ configFile: join(root, 'web', 'vite.config.ts'), logLevel: 'error', build: { outDir: out, emptyOutDir: true } });
    const committed = join(root, 'web', 'dist');
    assert.deepEqual(files(committed), files(out));
    for (const file of files(out)) {
      assert.ok(readFileSync(join(committed, file)).equals(readFileSync(join(out, file))), `web/dist/${file} differs from a fresh build`);
    }
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});
