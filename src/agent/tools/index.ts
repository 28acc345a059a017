/**
 * The agent's tools, as the rest of Spark imports them: what runs a call (runner.ts) and what the
 * model is told (the definitions).
 */
export * from "./runner.js";
