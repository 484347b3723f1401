/** The package's root directory. */
export const root: string;
/** Whether src/ is here: a checkout, not an installed package. */
export function hasSources(): boolean;
/** Whether dist/ is what to run: newer than every file under src/, or there is no src/ (and TICKLER_FROM_SOURCE is not 1). */
export function buildIsFresh(): boolean;
