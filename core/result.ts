// Errors at a boundary are values, never uncaught throws.

/** A failure with a stable machine-readable code and a human-readable message. */
export type AtollError = { code: string; message: string };

export type Ok<T> = { ok: true; value: T };
export type Err = { ok: false; error: AtollError };
export type Result<T> = Ok<T> | Err;

export const ok = <T>(value: T): Ok<T> => ({ ok: true, value });

/** An `Err` is assignable to every `Result<T>`, so one helper serves all call sites. */
export const err = (code: string, message: string): Err => ({ ok: false, error: { code, message } });
