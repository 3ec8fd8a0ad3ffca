import { resolve } from 'node:path';
import { defineConfig } from 'vite';
import { writeBuildStamp } from './server/client-build.ts';

// Two pages: the volunteer page at `/` and the researchers' dashboard at `/dashboard`.
// `atoll serve` serves dist/client; `vite` alone serves the pages for development,
// proxying the API and socket.io to a server on :8080.
export default defineConfig({
  root: 'client',
  // the stamp of the sources this build came from: `serve --build-if-needed` rebuilds a stale one
  plugins: [
    {
      name: 'atoll-build-stamp',
      apply: 'build',
      closeBundle(error) {
        if (!error) writeBuildStamp();
      },
    },
  ],
  publicDir: false,
  build: {
    outDir: resolve(import.meta.dirname, 'dist/client'),
    emptyOutDir: true,
    target: 'es2022',
    rollupOptions: {
      input: {
        index: resolve(import.meta.dirname, 'client/index.html'),
        dashboard: resolve(import.meta.dirname, 'client/dashboard.html'),
      },
    },
  },
  worker: { format: 'es' },
  server: {
    // cross-origin isolated as `atoll serve` makes it: the CPU engine's threads share memory
    headers: { 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Embedder-Policy': 'require-corp' },
    proxy: {
      '/api': 'http://localhost:8080',
      '/socket.io': { target: 'ws://localhost:8080', ws: true },
    },
  },
});
