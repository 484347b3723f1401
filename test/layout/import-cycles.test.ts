// No import cycles in src/, type-only imports included: every relative import of every module,
// as a graph, has no strongly connected component of more than one module (Tarjan). The
// direction between folders is eslint's (no-restricted-imports per folder, eslint.config.js);
// this catches a cycle inside one folder, which that rule cannot see.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { test } from 'node:test';

const src = join(import.meta.dirname, '..', '..', 'src');

function modules(directory: string): string[] {
  return readdirSync(directory).flatMap((name) => {
    const path = join(directory, name);
    if (statSync(path).isDirectory()) return modules(path);
    return name.endsWith('.ts') ? [path] : [];
  });
}

function importGraph(): Map<string, string[]> {
  const files = new Set(modules(src));
  const graph = new Map<string, string[]>();
  const specifier = /(?:import|export)\s[^;]*?from\s+'(\.[^']+)'|import\(\s*'(\.[^']+)'\s*\)/gs;
  for (const file of files) {
    const targets: string[] = [];
    for (const match of readFileSync(file, 'utf8').matchAll(specifier)) {
      const target = normalize(join(dirname(file), (match[1] ?? match[2])!)).replace(/\.js$/, '.ts');
      if (files.has(target)) targets.push(target);
    }
    graph.set(file, targets);
  }
  return graph;
}

function cyclesOf(graph: Map<string, string[]>): string[][] {
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const visit = (node: string): void => {
    index.set(node, counter);
    low.set(node, counter++);
    stack.push(node);
    onStack.add(node);
    for (const next of graph.get(node) ?? []) {
      if (!index.has(next)) {
        visit(next);
        low.set(node, Math.min(low.get(node)!, low.get(next)!));
      } else if (onStack.has(next)) {
        low.set(node, Math.min(low.get(node)!, index.get(next)!));
      }
    }
    if (low.get(node) !== index.get(node)) return;
    const component: string[] = [];
    for (;;) {
      const member = stack.pop()!;
      onStack.delete(member);
      component.push(member);
      if (member === node) break;
    }
    if (component.length > 1) cycles.push(component.map((file) => file.slice(src.length + 1)).sort());
  };
  for (const node of graph.keys()) if (!index.has(node)) visit(node);
  return cycles;
}

test('src/ has no import cycles, type-only imports included', () => {
  const graph = importGraph();
  assert.ok(graph.size > 100, `read ${graph.size} modules`);
  assert.deepEqual(cyclesOf(graph), []);
});

test('the check finds a cycle when there is one', () => {
  const graph = new Map([['/a.ts', ['/b.ts']], ['/b.ts', ['/c.ts']], ['/c.ts', ['/a.ts']], ['/d.ts', ['/a.ts']]]);
  assert.equal(cyclesOf(graph).length, 1);
});
