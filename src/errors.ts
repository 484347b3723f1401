/** The error catalogue and `TicklerError` live in the domain (domain/errors.ts), which imports nothing outside itself. */
export * from './domain/errors.js';
