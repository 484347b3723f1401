/** The repository's root directory. */
export const root: string;
/** Whether dist/ is newer than every file under src/ (and TICKLER_FROM_SOURCE is not 1). */
export function buildIsFresh(): boolean;
