// Idempotent closing: the first call closes, later calls return at once (as before the first
// finishes, so a second close never waits on a hung one).

export function closeOnce(close: () => Promise<void>): () => Promise<void> {
  let closed = false;
  return async () => {
    if (closed) return;
    closed = true;
    await close();
  };
}
