/**
 * Servers whose lifetime the benchmark runner manages, and CPU profile pointers. With
 * `--cpu-prof` the server runs under `node --cpu-prof`; V8 writes the profile when the
 * process exits, so `stopAndProfile` stops it with SIGTERM first and then summarises the
 * profile's self time by function and by file: the top frames are where the engine spends
 * the benchmark, which is what a missed target needs next.
 */
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';
import type { BenchContext } from './context.js';
import { cpuProfilesIn, repoRoot, startBenchServer, type BenchServer, type ServerStartOptions } from './server-process.js';

const topFramesShown = 12;
const topFilesShown = 6;

/** Starts a server that is SIGKILLed at the end of the benchmark if it is still running then. */
export async function startManagedServer(context: BenchContext, label: string,
  options: Omit<ServerStartOptions, 'cpuProfileDir'>): Promise<BenchServer> {
  const server = await startBenchServer({
    ...options,
    ...(context.cpuProfile ? { cpuProfileDir: context.profileDir(label) } : {}),
  });
  context.defer(async () => {
    await server.kill();
    // The server logs at warn level: anything it wrote is worth seeing beside the figures.
    const stderr = server.stderrTail();
    if (stderr.trim() !== '') context.log(`${label}: server stderr (tail):\n${stderr.slice(-2_000)}`);
  });
  return server;
}

/** SIGTERM; then, when profiling, the top self-time frames as note lines. */
export async function stopAndProfile(context: BenchContext, label: string, server: BenchServer): Promise<string[]> {
  const exitCode = await server.stop();
  const notes: string[] = [];
  if (exitCode !== 0) notes.push(`${label}: the server exited with ${exitCode} on SIGTERM: ${server.stderrTail().slice(-500)}`);
  if (!context.cpuProfile) return notes;
  const dir = context.profileDir(label);
  const files = cpuProfilesIn(dir);
  if (files.length === 0) {
    notes.push(`${label}: no CPU profile was written in ${dir}`);
    return notes;
  }
  // Node names profiles CPU.<date>.<time>.<pid>.<thread>.<seq>; thread 0 is the main thread,
  // the others are tsx's module-loader worker, which only shows start-up work.
  const mainThread = files.filter((file) => /\.\d+\.0\.\d+\.cpuprofile$/.test(file));
  for (const file of mainThread.length > 0 ? mainThread : files) notes.push(...summariseProfile(label, file));
  return notes;
}

interface CpuProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}

interface CpuProfile {
  nodes: CpuProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

export interface ProfileSummary {
  totalMs: number;
  idleMs: number;
  topFrames: { frame: string; selfMs: number }[];
  topFiles: { file: string; selfMs: number }[];
}

/** Self time per function and per file, from the sample stream of a .cpuprofile. */
export function profileSummaryOf(profile: CpuProfile): ProfileSummary {
  const nodesById = new Map(profile.nodes.map((node) => [node.id, node]));
  const byFrame = new Map<string, number>();
  const byFile = new Map<string, number>();
  let totalUs = 0;
  let idleUs = 0;
  profile.samples.forEach((nodeId, index) => {
    const deltaUs = Math.max(0, profile.timeDeltas[index] ?? 0);
    const node = nodesById.get(nodeId);
    if (node === undefined) return;
    totalUs += deltaUs;
    const { functionName, url, lineNumber } = node.callFrame;
    if (functionName === '(idle)') {
      idleUs += deltaUs;
      return;
    }
    const file = shortUrl(url);
    const frame = `${functionName === '' ? '(anonymous)' : functionName} ${file}${file === '' ? '' : `:${lineNumber + 1}`}`;
    byFrame.set(frame, (byFrame.get(frame) ?? 0) + deltaUs);
    byFile.set(file === '' ? functionName : file, (byFile.get(file === '' ? functionName : file) ?? 0) + deltaUs);
  });
  const top = (map: Map<string, number>, count: number): [string, number][] =>
    [...map.entries()].sort((a, b) => b[1] - a[1]).slice(0, count);
  return {
    totalMs: totalUs / 1_000,
    idleMs: idleUs / 1_000,
    topFrames: top(byFrame, topFramesShown).map(([frame, us]) => ({ frame, selfMs: us / 1_000 })),
    topFiles: top(byFile, topFilesShown).map(([file, us]) => ({ file, selfMs: us / 1_000 })),
  };
}

function summariseProfile(label: string, file: string): string[] {
  const summary = profileSummaryOf(JSON.parse(readFileSync(file, 'utf8')) as CpuProfile);
  const busyMs = Math.max(1, summary.totalMs - summary.idleMs);
  const share = (ms: number): string => `${((ms / busyMs) * 100).toFixed(1)} %`;
  return [
    `${label} CPU profile \`${relative(repoRoot, file)}\`: ${(busyMs / 1_000).toFixed(1)} s busy of ` +
      `${(summary.totalMs / 1_000).toFixed(1)} s sampled (main thread). Top self time: ` +
      summary.topFrames.map((entry) => `\`${entry.frame}\` ${share(entry.selfMs)}`).join('; ') + '.',
    `${label} self time by file: ` +
      summary.topFiles.map((entry) => `\`${entry.file}\` ${share(entry.selfMs)}`).join('; ') + '.',
  ];
}

/** Repository-relative for our files, package-relative for dependencies, bare for node internals. */
function shortUrl(url: string): string {
  if (url === '') return '';
  const path = url.startsWith('file://') ? decodeURIComponent(url.slice('file://'.length)) : url;
  const modules = path.lastIndexOf('node_modules/');
  if (modules >= 0) return path.slice(modules + 'node_modules/'.length);
  return path.startsWith(repoRoot) ? relative(repoRoot, path) : path;
}
