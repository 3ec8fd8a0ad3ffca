// Lets plain Node run the TypeScript sources: tsx for .ts, plus the `?raw` text
// imports that Vite understands (used for the WGSL shaders), so browser and Node
// load shaders through the same `import src from './x.wgsl?raw'` line.
// Worker threads get the same hooks with `execArgv: ['--import', <this file's URL>]`.
import { register } from 'node:module';
import { register as registerTsx } from 'tsx/esm/api';

register('./raw-loader.js', import.meta.url);
registerTsx();
