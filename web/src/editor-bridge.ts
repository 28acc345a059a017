/**
 * The front end's side of the VS Code pane's channel (host.ts carries it): messages from the
 * extension acted on, and what the pane tells the extension.
 */
import { addChip } from "./chips.js";
import { inEditor, onEditor, pathOf, toEditor } from "./host.js";
import { send } from "./send.js";
import { getState, setState, subscribe } from "./store.js";

type Tier = "spark" | "deep";

/** The open task's tier, when it is one the editor has (not `auto`). */
function openTier(): Tier | undefined {
  const s = getState();
  const model = s.tasks.find((t) => t.id === s.current)?.model;
  return model === "spark" || model === "deep" ? model : undefined;
}

/** The editor's tier changed: the open task and new ones take it. */
function takeTier(tier: Tier): void {
  const s = getState();
  const task = s.tasks.find((t) => t.id === s.current);
  if (s.draftModel !== tier) setState({ draftModel: tier });
  if (task && task.model !== tier) send({ type: "model", task: task.id, model: tier });
}

/** Whether a task works in a worktree or copy of its own (not in the workspace itself). */
function isolated(task: string): boolean {
  const kind = getState().tasks.find((t) => t.id === task)?.workspace?.kind;
  return kind === "worktree" || kind === "copy";
}

/**
 * In the VS Code pane: what the editor asks of the app (Ask Spark, the diff editor's Apply and
 * Discard), and paths in the transcript that open in the editor. Nothing in a browser.
 */
export function bridgeEditor(): void {
  onEditor((message) => {
    switch (message.type) {
      case "ask":
        addChip({
          where: message.where,
          code: message.code,
          ...(message.language ? { language: message.language } : {}),
        });
        return;
      case "tier": {
        // Just loaded: a task open keeps its tier, and the editor takes it (below); else the
        // editor's tier is the new task's.
        const open = openTier();
        if (message.initial && open) toEditor({ type: "tier", tier: open });
        else if (message.initial) setState({ draftModel: message.tier });
        else takeTier(message.tier);
        return;
      }
      case "ping":
        requestAnimationFrame(() => requestAnimationFrame(() => toEditor({ type: "painted" })));
        return;
      // A task in a worktree or copy lands with Apply and drops with Discard; one in place keeps
      // (its changes are already in the workspace) or reverts.
      case "apply":
        send({
          type: isolated(message.task) ? "apply" : "keep",
          task: message.task,
          ...(message.path ? { path: message.path } : {}),
        });
        return;
      case "discard":
        send({
          type: isolated(message.task) ? "discard" : "revert",
          task: message.task,
          ...(message.path ? { path: message.path } : {}),
        });
        return;
    }
  });
  if (inEditor) {
    // The open task's tier is the editor's: said when another task opens or its tier changes. An
    // applied file is said too, so that its diff tab shows the file and offers no Apply.
    let said: string | undefined;
    let review: unknown;
    subscribe(() => {
      const s = getState();
      const tier = openTier();
      const key = `${s.current ?? ""}:${tier ?? ""}`;
      if (tier && key !== said) toEditor({ type: "tier", tier });
      said = key;
      if (s.review !== review) {
        review = s.review;
        if (s.review?.applied?.length)
          toEditor({ type: "applied", task: s.review.task, paths: s.review.applied });
      }
    });
    document.documentElement.classList.add("host-vscode");
    document.addEventListener("click", (event) => {
      const code = (event.target as Element | null)?.closest?.("code");
      if (!code || code.closest("pre")) return;
      const target = pathOf(code.textContent ?? "");
      if (!target) return;
      event.preventDefault();
      toEditor({ type: "open", ...target });
    });
  }
}
