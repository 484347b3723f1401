/**
 * The web UI (web/, built by Vite into web/dist, which is committed): `GET /` answers its
 * HTML shell and `GET /ui/assets/{file}` its scripts and styles, all without a key. The shell
 * holds no data: the browser asks the API for everything, with the key the person typed.
 * The files are read once, when the app is built, and served from memory by name, so no
 * request path ever reaches the file system.
 */
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { extname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { TicklerError } from '../errors.js';
import type { App } from './context.js';

/** web/dist, from src/api or from the compiled dist/api alike. */
export const webDistDir = resolve(fileURLToPath(new URL('.', import.meta.url)), '..', '..', 'web', 'dist');

const contentTypes: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
};

interface Asset {
  body: Buffer;
  type: string;
}

function loadAssets(dir: string): { shell: Buffer | null; assets: Map<string, Asset> } {
  const assets = new Map<string, Asset>();
  const assetDir = join(dir, 'assets');
  if (existsSync(assetDir)) {
    for (const name of readdirSync(assetDir)) {
      const type = contentTypes[extname(name)];
      if (type !== undefined) assets.set(name, { body: readFileSync(join(assetDir, name)), type });
    }
  }
  const shellPath = join(dir, 'index.html');
  return { shell: existsSync(shellPath) ? readFileSync(shellPath) : null, assets };
}

const notBuilt = '<!doctype html><meta charset="utf-8"><title>tickler</title>'
  + '<p>The web UI is not built here: run <code>npm run build:web</code>. The JSON API is at <code>/v1/</code>.</p>';

export function registerWebUi(app: App, dir = webDistDir): void {
  const { shell, assets } = loadAssets(dir);
  // A strict policy: the shell loads only its own scripts and styles, and talks only to this origin.
  const policy = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'";

  app.get('/', {
    config: { auth: 'none', doc: { summary: 'the web UI (its shell; the data comes from the API with the key typed in)', answers: { 200: { contentType: 'text/html' } } } },
  }, async (_request, reply) => reply
    .type('text/html; charset=utf-8')
    .header('cache-control', 'no-cache')
    .header('content-security-policy', policy)
    .send(shell ?? notBuilt));

  app.get('/ui/assets/:file', {
    config: { auth: 'none', doc: { summary: 'the web UI\'s scripts and styles', answers: { 200: { contentType: 'application/javascript' } } } },
  }, async (request, reply) => {
    const { file } = request.params as { file: string };
    const asset = assets.get(file);
    if (asset === undefined) throw new TicklerError('not_found', `no asset ${file.slice(0, 200)}`);
    // Built file names carry a hash of their content.
    return reply.type(asset.type).header('cache-control', 'public, max-age=31536000, immutable').send(asset.body);
  });
}
