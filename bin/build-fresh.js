// Whether dist/ (scripts/build.mjs) is what to run: in a checkout, when its stamp is newer
// than every file under src/, so that running it runs what the sources say; in an installed
// package, which ships dist/ and no src/, always. Shared by the `tickler` command and
// bench:peers, which drives the SDK from the same build as the server it starts.
// TICKLER_FROM_SOURCE=1 answers false.
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';

export const root = resolve(import.meta.dirname, '..');

/** Whether src/ is here: a checkout, not an installed package. */
export function hasSources() {
  return existsSync(join(root, 'src'));
}

export function buildIsFresh() {
  if (process.env.TICKLER_FROM_SOURCE === '1') return false;
  let builtMs;
  try {
    builtMs = statSync(join(root, 'dist', '.built')).mtimeMs;
  } catch {
    return false;
  }
  if (!hasSources()) return true;
  const src = join(root, 'src');
  for (const entry of readdirSync(src, { recursive: true, withFileTypes: true })) {
    if (entry.isFile() && statSync(join(entry.parentPath ?? entry.path, entry.name)).mtimeMs > builtMs) return false;
  }
  return true;
}
