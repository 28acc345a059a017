/**
 * The workspace boundary of the agent's file tools: the workspace is a root of the confined file
 * layer (fs/confined.ts), whose contract says what holds. This module keeps the names the agent's
 * modules know it by.
 */
export { ConfinedRoot as Workspace, type ConfinedOptions as WorkspaceOptions } from "../fs/confined.js";
export { ToolError } from "../fs/tool-error.js";
