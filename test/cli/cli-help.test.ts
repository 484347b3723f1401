// Every subcommand's --help lists each of its options with a description, and the global
// ones (--url, --api-key) beside them: read from the real program, so a new option without a
// description, or a command whose help hides the global flags, fails here.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Command } from 'commander';
import { buildProgram } from '../../src/cli/program.js';

function leaves(command: Command, path: string[] = []): { path: string; command: Command }[] {
  if (command.commands.length === 0) return [{ path: path.join(' '), command }];
  return command.commands.filter((sub) => sub.name() !== 'help').flatMap((sub) => leaves(sub, [...path, sub.name()]));
}

const commands = leaves(buildProgram({}));

test('the program has the commands people look for', () => {
  const paths = commands.map((leaf) => leaf.path);
  for (const expected of ['serve', 'worker', 'jobs create', 'jobs patch', 'jobs ls', 'jobs silent', 'runs ls', 'dlq ls',
    'schedules preview']) {
    assert.ok(paths.includes(expected), `missing ${expected}: ${paths.join(', ')}`);
  }
});

for (const { path, command } of commands) {
  test(`tickler ${path} --help lists its options, each described, and the global ones`, () => {
    const help = command.helpInformation();
    for (const option of command.options) {
      assert.ok(help.includes(option.flags), `${option.flags} missing from the help of ${path}`);
      assert.notEqual(option.description.trim(), '', `${option.flags} of ${path} has no description`);
    }
    assert.match(help, /Global Options:[\s\S]*--url <url>[\s\S]*--api-key <key>/);
  });
}
