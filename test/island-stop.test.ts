// Ctrl-C on an island in the middle of a round: the island says that the round's work is dropped unsent
// (how many steps of how many), then leaves cleanly (exit 0), and the server counts none of its tokens.

import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type Proc, freePort, getJson, sleep, spawnServe, tempDir, waitFor } from './helpers/server.ts';
import { startIsland } from './helpers/dashboard-server.ts';

const runDir = tempDir('atoll-island-stop-');
const procs: Proc[] = [];
afterAll(async () => {
  await Promise.all(procs.map((p) => p.stop()));
  rmSync(runDir, { recursive: true, force: true });
});

describe('Ctrl-C on an island mid-round', () => {
  it('says the unfinished round is dropped, with its steps, and exits 0', async () => {
    // rounds long enough (20,000 steps: a minute on a quiet machine, 88k tokens/s) that the signal lands
    // in the middle of the first (a dense uplink: the sparse one caps a round at 50 steps, and serve says so)
    const config = join(runDir, 'run.json');
    writeFileSync(config, JSON.stringify({ coordinator: { maxInnerSteps: 20_000, minInnerSteps: 20_000 } }));
    const server = await spawnServe(
      ['--preset', 'tiny', '--run-dir', join(runDir, 'run'), '--config', config, '--inner-steps', '20000'].concat([
        '--codec',
        'int8',
        '--no-eval',
      ]),
      await freePort(),
    );
    procs.push(server);
    const island = startIsland(server.url, 'stop-island');
    procs.push(island);
    await waitFor('the island measured', () => island.output.some((l) => l.includes('measured')), 60_000, 100);
    // into the round; 3 s was once too soon on loaded cores (θ and the assignment not yet in)
    await sleep(8000);
    island.child.kill('SIGINT');
    expect(await island.exited).toBe(0);
    const said = island.output.find((l) => l.includes('dropped unsent'));
    expect(said).toMatch(/round \d+ is dropped unsent \([1-9]\d* of 20000 steps done, its tokens not counted\)/);
    expect(island.output.join('\n')).toMatch(/atoll island: stopped after 0 rounds/);
    expect((await getJson<{ tokensTotal: number }>(`${server.url}/api/status`)).tokensTotal).toBe(0);
  }, 120_000);
});
