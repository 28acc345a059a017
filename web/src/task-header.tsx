/**
 * The open task's header: its title (double-click renames), the project context it got, where it
 * works, the tier (the ⚡ toggle and the picker) and its actions (Undo turn, Redo, Review, Rename,
 * Delete).
 */
import { useEffect, useRef, useState } from "preact/hooks";
import type { TaskStatus, TaskSummary } from "../../src/app/protocol.js";
import { send } from "./send.js";
import { getState, useStore } from "./store.js";

/** Ctrl+Shift+L (Cmd+Shift+L): spark ⇄ deep. */
export function toggleTier(task: TaskSummary): void {
  send({ type: "model", task: task.id, model: task.model === "spark" ? "deep" : "spark" });
  // The sidebar shows the new tier when the server confirms it.
}

function ModelPicker(props: {
  task: TaskSummary;
  models: string[];
  status: TaskStatus | undefined;
}): preact.JSX.Element {
  const { task } = props;
  return (
    <div class="model-picker">
      <button
        class={`lightning${task.model === "spark" ? " on" : ""}`}
        title="Fast tier on/off (Ctrl+Shift+L)"
        onClick={() => toggleTier(task)}
      >
        ⚡
      </button>
      <select
        class="model-select"
        title="Tier: which of the server's models answers (spark, deep, auto)"
        aria-label="Tier"
        value={task.model}
        onChange={(e) => send({ type: "model", task: task.id, model: (e.target as HTMLSelectElement).value })}
      >
        {props.models.map((m) => (
          <option key={m} value={m}>
            {m === "spark" ? "⚡ spark" : m}
          </option>
        ))}
      </select>
      {task.model === "auto" && props.status?.route ? (
        <span class="route" title="the tier the router chose, and why">
          → {props.status.route}
          {props.status.routeRule ? ` (${props.status.routeRule})` : ""}
        </span>
      ) : null}
    </div>
  );
}

function formatBytes(bytes: number): string {
  return bytes < 1024 ? `${bytes} B` : `${(bytes / 1024).toFixed(1)} KiB`;
}

/** The AGENTS.md files the task's agent got (names and sizes), its skills, and any warning. */
function ProjectContextBadge(props: {
  context: ReturnType<typeof getState>["context"];
}): preact.JSX.Element | null {
  const context = props.context;
  if (!context || (context.instructions.length === 0 && context.skills.length === 0)) return null;
  const files = context.instructions.map(
    (f) => `${f.label} (${formatBytes(f.bytes)}${f.truncated ? ", cut" : ""})`,
  );
  const title = [
    files.length > 0 ? `Instructions: ${files.join(", ")}` : "No AGENTS.md",
    context.skills.length > 0 ? `Skills: ${context.skills.map((s) => `$${s.name}`).join(" ")}` : "",
    ...context.warnings.map((w) => `⚠ ${w}`),
  ]
    .filter((line) => line !== "")
    .join("\n");
  return (
    <span class={`project-context${context.warnings.length > 0 ? " warn" : ""}`} title={title}>
      {files.length > 0 ? files.join(" · ") : null}
      {context.skills.length > 0 ? (
        <span class="skills-count">
          {files.length > 0 ? " · " : ""}
          {context.skills.length} skill{context.skills.length === 1 ? "" : "s"}
        </span>
      ) : null}
      {context.warnings.length > 0 ? " ⚠" : ""}
    </span>
  );
}

/**
 * One row at any width: the title, the tier, Review, and the rest. Wide, the rest (project context,
 * where the task works, Undo turn, Redo, Rename, Delete) sits in the row too; narrow (a phone, the
 * VS Code pane), it goes into the ⋯ menu, which closes on a choice, a click elsewhere or Escape.
 */
export function TaskHeader(props: {
  task: TaskSummary;
  models: string[];
  status: TaskStatus | undefined;
}): preact.JSX.Element {
  const [renaming, setRenaming] = useState(false);
  const [title, setTitle] = useState(props.task.title);
  const [menu, setMenu] = useState(false);
  const header = useRef<HTMLElement>(null);
  const { context } = useStore();
  useEffect(() => {
    if (!menu) return;
    const close = (event: Event): void => {
      if (
        event instanceof KeyboardEvent
          ? event.key === "Escape"
          : !header.current?.contains(event.target as Node)
      )
        setMenu(false);
    };
    document.addEventListener("pointerdown", close);
    document.addEventListener("keydown", close);
    return () => {
      document.removeEventListener("pointerdown", close);
      document.removeEventListener("keydown", close);
    };
  }, [menu]);
  /** A menu entry: does its thing, and the menu closes. */
  const act = (action: () => void) => () => {
    setMenu(false);
    action();
  };
  const rename = (): void => {
    setTitle(props.task.title);
    setRenaming(true);
  };
  return (
    <header class="task-header" ref={header}>
      {renaming ? (
        <form
          class="rename"
          onSubmit={(e) => {
            e.preventDefault();
            send({ type: "task.rename", task: props.task.id, title });
            setRenaming(false);
          }}
        >
          <input
            class="rename-input"
            value={title}
            onInput={(e) => setTitle((e.target as HTMLInputElement).value)}
          />
          <button type="submit">Save</button>
        </form>
      ) : (
        <h1 class="task-name" title={`${props.task.title} (double-click to rename)`} onDblClick={rename}>
          {props.task.title}
        </h1>
      )}
      <div class={`header-more${menu ? " open" : ""}`} role={menu ? "menu" : undefined}>
        <ProjectContextBadge context={context} />
        <WorkspaceBadge workspace={props.task.workspace} />
        <div class="header-actions">
          <button
            class="undo-button small"
            disabled={props.task.undoTurn === undefined}
            title={
              props.task.undoTurn === undefined
                ? "No turn of this task changed files yet"
                : `Put the files back as they were before turn ${props.task.undoTurn} (only files: what a command did elsewhere, a database or a network call, stays done)`
            }
            onClick={act(() => send({ type: "undo", task: props.task.id }))}
          >
            ↶ Undo turn{props.task.undoTurn === undefined ? "" : ` ${props.task.undoTurn}`}
          </button>
          {props.task.redoTurns ? (
            <button
              class="redo-button small"
              title={`Take the last undo back: the files as turn${props.task.redoTurns.length === 1 ? "" : "s"} ${props.task.redoTurns.join(", ")} left them`}
              onClick={act(() => send({ type: "redo", task: props.task.id }))}
            >
              ↷ Redo
            </button>
          ) : null}
          <button class="rename-button small" onClick={act(rename)}>
            Rename
          </button>
          <button
            class="delete-button small danger"
            onClick={act(() => {
              const ws = props.task.workspace;
              const what =
                ws?.kind === "worktree" || ws?.kind === "copy"
                  ? `Its ${ws.kind === "worktree" ? "worktree and branch are" : "copy is"} removed: changes not applied are lost.`
                  : "Its changes stay on disk.";
              if (confirm(`Delete the task “${props.task.title}”? ${what}`))
                send({ type: "task.delete", task: props.task.id });
            })}
          >
            Delete
          </button>
        </div>
      </div>
      <ModelPicker task={props.task} models={props.models} status={props.status} />
      <button
        class="review-button"
        title="The task's changes, file by file"
        onClick={() => send({ type: "review", task: props.task.id })}
      >
        Review<span class="long"> changes</span>
        {props.task.changedFiles.length > 0 ? ` (${props.task.changedFiles.length})` : ""}
      </button>
      <button
        class="task-menu-button"
        title="More: where the task works, Undo turn, Rename, Delete"
        aria-label="More actions"
        aria-expanded={menu}
        onClick={() => setMenu((open) => !open)}
      >
        ⋯
      </button>
    </header>
  );
}

/** "12.3 MB": a size for people. */
function bytesText(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  const units = ["KB", "MB", "GB", "TB"];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value < 10 ? value.toFixed(1) : Math.round(value)} ${units[unit]}`;
}

/** Where the task works: its worktree's branch, a copy, or the workspace itself; and its disk. */
function WorkspaceBadge(props: { workspace: TaskSummary["workspace"] }): preact.JSX.Element | null {
  const ws = props.workspace;
  if (!ws) return null;
  const label =
    ws.kind === "worktree" ? `⎇ ${ws.branch ?? "worktree"}` : ws.kind === "copy" ? "⧉ copy" : "in place";
  const size = ws.bytes === undefined || ws.kind === "in-place" ? "" : ` · ${bytesText(ws.bytes)}`;
  const title =
    ws.kind === "in-place"
      ? "This task edits the workspace itself"
      : `This task works in ${ws.kind === "worktree" ? `a worktree of its own on branch ${ws.branch ?? ""}` : "a copy of the workspace"} (${ws.path}): nothing lands in the workspace until you apply it in Review`;
  return (
    <span class={`workspace-badge ${ws.kind}`} title={title}>
      {label}
      {size}
    </span>
  );
}
