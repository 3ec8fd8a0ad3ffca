// Node module hook: `import text from './file.ext?raw'` gives the file's text, as in Vite.
import { readFile } from 'node:fs/promises';

export async function resolve(specifier, context, next) {
  if (specifier.endsWith('?raw')) {
    const url = new URL(specifier, context.parentURL);
    return { url: url.href, format: 'raw-text', shortCircuit: true };
  }
  return next(specifier, context);
}

export async function load(url, context, next) {
  if (url.endsWith('?raw')) {
    const path = new URL(url.slice(0, -'?raw'.length));
    const text = await readFile(path, 'utf8');
    return { format: 'module', source: `export default ${JSON.stringify(text)};`, shortCircuit: true };
  }
  return next(url, context);
}
