import { circles, importGraph } from '../bin/structure.ts';
console.log(JSON.stringify(circles(importGraph(process.cwd()))));
