// Whether dist/ (scripts/build.mjs) is newer than every file under src/, so that running it
// runs what the sources say. Shared by the `tickler` command and bench:peers, which drives
// the SDK from the same build as the server it starts. TICKLER_FROM_SOURCE=1 answers false.
import { readdirSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';

export const root = resolve(import.meta.dirname, '..');

export function buildIsFresh() {
  if (process.env.TICKLER_FROM_SOURCE === '1') return false;
  let builtMs;
  try {
    builtMs = statSync(join(root, 'dist', '.built')).mtimeMs;
  } catch {
    return false;
  }
  const src = join(root, 'src');
  for (const entry of readdirSync(src, { recursive: true, withFileTypes: true })) {
    if (entry.isFile() && statSync(join(entry.parentPath ?? entry.path, entry.name)).mtimeMs > builtMs) return false;
  }
  return true;
}
