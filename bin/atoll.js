#!/usr/bin/env node
// The `atoll` command. The sources are TypeScript; bin/register.js lets Node run them.
import './register.js';

const { main } = await import('../instruments/cli.ts');
await main(process.argv);
