// Every command the README's command table names exists and answers --help (bench's subcommands,
// named in its row, too), so a documented command can never be missing from the CLI again.

import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { buildProgram } from '../instruments/cli.ts';

/** [command, ...subcommands] per row of the README's "## Commands" table. */
function readmeCommands(): string[][] {
  const md = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
  const section = md.slice(md.indexOf('## Commands'));
  const rows = section.split('\n').filter((l) => /^\| `[a-z]+` \|/.test(l));
  return rows.map((l) => {
    const [, cmd, what] = l.split('|').map((c) => c.trim());
    const name = cmd.replace(/`/g, '');
    const subs = name === 'bench' ? [...what.matchAll(/`([a-z]+)`/g)].map((m) => m[1]) : [];
    return [name, ...subs];
  });
}

/** Runs `atoll <args> --help` in process; returns what it printed. */
async function help(args: string[]): Promise<string> {
  const program = buildProgram();
  let out = '';
  const quiet = (c: Command) => {
    c.exitOverride().configureOutput({
      writeOut: (s) => {
        out += s;
      },
      writeErr: (s) => {
        out += s;
      },
    });
    c.commands.forEach(quiet);
  };
  quiet(program);
  try {
    await program.parseAsync(['node', 'atoll', ...args, '--help']);
  } catch (e) {
    expect((e as { code?: string }).code).toBe('commander.helpDisplayed');
  }
  return out;
}

describe('the CLI has every command the README names', () => {
  const table = readmeCommands();
  it('reads the table', () => {
    expect(table.map((r) => r[0])).toEqual(
      expect.arrayContaining(['serve', 'island', 'train', 'sample', 'simulate', 'bench']),
    );
  });
  for (const [cmd, ...subs] of table) {
    for (const args of [[cmd], ...subs.map((s) => [cmd, s])]) {
      it(`atoll ${args.join(' ')} --help`, async () => {
        const out = await help(args);
        expect(out).toContain(`Usage: atoll ${args.join(' ')}`);
      });
    }
  }
  it('serve --help lists the Redis roles', async () => {
    const out = await help(['serve']);
    for (const f of ['--redis <url>', '--role <role>', 'gateway', 'aggregator', '"all"', '--lease-ms <ms>'])
      expect(out).toContain(f);
  });
  it('serve takes --mix-group 0 or a power of two (2..16) and --mix-spot-rate; the Redis roles refuse mixing', async () => {
    const out = await help(['serve']);
    for (const f of ['--mix-group <k>', '--mix-spot-rate <f>']) expect(out).toContain(f);
    expect(await help(['island'])).toContain('--no-mix');
    for (const k of ['3', '1', '32', 'x']) {
      const program = buildProgram();
      program.exitOverride().configureOutput({ writeOut: () => {}, writeErr: () => {} });
      program.commands.forEach((c) => c.exitOverride().configureOutput({ writeOut: () => {}, writeErr: () => {} }));
      await expect(program.parseAsync(['node', 'atoll', 'serve', '--mix-group', k])).rejects.toMatchObject({
        code: 'commander.invalidArgument',
      });
    }
    const { serve } = await import('../instruments/commands/serve.ts');
    await expect(serve({ redis: 'redis://127.0.0.1:1', role: 'gateway', mixGroup: 4 })).rejects.toMatchObject({
      code: 'E_BAD_CONFIG',
    });
  });
  it('serve --mix-ice-servers takes a bounded JSON array of STUN/TURN servers, refused with a code before anything is written', async () => {
    expect(await help(['serve'])).toContain('--mix-ice-servers <file>');
    const { serve, readIceServers } = await import('../instruments/commands/serve.ts');
    const dir = mkdtempSync(join(tmpdir(), 'atoll-ice-'));
    const file = (name: string, v: unknown) => {
      const f = join(dir, name);
      writeFileSync(f, typeof v === 'string' ? v : JSON.stringify(v));
      return f;
    };
    // the docs' example (docs/protocol.md, "WebRTC settings")
    const good = [
      { urls: 'stun:stun.example.org:3478' },
      {
        urls: ['turn:turn.example.org:3478?transport=udp', 'turns:turn.example.org:5349?transport=tcp'],
        username: 'u',
        credential: 'c',
      },
    ];
    expect(readIceServers(file('good.json', good))).toEqual(good);
    for (const bad of [
      '{',
      [{ urls: 'http://example.org' }],
      [{ urls: 'stun:a', extra: 1 }],
      Array.from({ length: 9 }, () => ({ urls: 'stun:a' })),
      [{ urls: [] }],
      { urls: 'stun:a' },
    ]) {
      expect(() => readIceServers(file('bad.json', bad)), JSON.stringify(bad)).toThrow(
        expect.objectContaining({ code: 'E_BAD_CONFIG' }),
      );
    }
    expect(() => readIceServers(join(dir, 'missing.json'))).toThrow(expect.objectContaining({ code: 'E_BAD_CONFIG' }));
    const runDir = join(dir, 'run');
    await expect(
      serve({ runDir, mixGroup: 4, mixIceServers: file('bad.json', [{ urls: 'http://x' }]) }),
    ).rejects.toMatchObject({ code: 'E_BAD_CONFIG' });
    await expect(serve({ runDir, mixIceServers: file('good.json', good) })).rejects.toMatchObject({
      code: 'E_BAD_CONFIG',
    }); // without --mix-group
    expect(existsSync(runDir)).toBe(false);
    rmSync(dir, { recursive: true, force: true });
  });
  it('island --help lists the numerics and devices flags', async () => {
    const out = await help(['island']);
    for (const f of ['--precision <p>', '"f32"', '"f16"', '--devices <n>']) expect(out).toContain(f);
  });
  it('simulate --help lists every flag simulateOptionsFromCli reads', async () => {
    const out = await help(['simulate']);
    for (const f of [
      '--preset',
      '--model',
      '--islands',
      '--tokens',
      '--rounds',
      '--mode',
      '--codec',
      '--downlink',
      '--inner-steps',
      '--warm-start-tokens',
      '--compare',
      '--seed',
      '--workers',
      '--data',
      '--out',
      '--engine',
      '--json',
      '--quick',
      '--eval-batches',
      '--cold',
      '--from-fleet',
    ])
      expect(out).toContain(f);
  });
  it('fleet --help lists every flag fleetSpecFromCli reads', async () => {
    const out = await help(['fleet']);
    for (const f of [
      '--preset',
      '--islands',
      '--browsers',
      '--engines',
      '--batches',
      '--duty',
      '--schedule',
      '--tokens',
      '--data',
      '--seed',
      '--mode',
      '--codec',
      '--config',
      '--redis [url]',
      '--mix-group <k>',
      '--evals',
      '--eval-batches',
      '--workers',
      '--timeout',
      '--out',
      '--json',
    ])
      expect(out).toContain(f);
  });
});
