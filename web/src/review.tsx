/**
 * A task's review: its changes per file, with Apply and Discard for a task in a worktree or copy
 * (`TaskReview`), Revert and Keep for one in place (`Review`).
 */
import { Diff } from "./diff.js";
import { inEditor } from "./host.js";
import { send } from "./send.js";
import { getState, setState } from "./store.js";

/** The review of a task in a worktree or copy: its diff since it started, Apply and Discard. */
function TaskReview(props: {
  task: string;
  review: NonNullable<ReturnType<typeof getState>["review"]>;
}): preact.JSX.Element {
  const { review } = props;
  const files = review.files;
  const applied = new Set(review.applied ?? []);
  const conflicts = new Map((review.conflicts ?? []).map((c) => [c.path, c.reason]));
  const where =
    review.workspace?.kind === "worktree"
      ? `in its worktree ${review.workspace.branch ?? ""}`
      : review.workspace?.kind === "copy"
        ? "in its copy of the workspace"
        : "in its workspace";
  const pending = files.filter((f) => !applied.has(f.path)).length;
  const summary = `${files.length} file${files.length === 1 ? "" : "s"}${pending < files.length ? `, ${files.length - pending} applied` : ""}`;
  const detail = `${where}, against where it started`;
  return (
    <div class="review task-review">
      <div class="review-head">
        <span class="review-title" title={`${summary} ${detail}`}>
          <strong>
            Changes<span class="long"> of this task</span>
          </strong>{" "}
          <span class="review-count">({summary}</span>
          <span class="review-where"> {detail}</span>)
        </span>
        <span class="review-actions">
          {files.length > 0 ? (
            <>
              <button
                class="apply-all"
                disabled={pending === 0}
                title="Bring these changes into the workspace (a 3-way merge: if any file conflicts, nothing is written)"
                onClick={() => send({ type: "apply", task: props.task })}
              >
                Apply all
              </button>
              <button
                class="discard-all danger"
                onClick={() => {
                  if (
                    confirm("Discard this task's worktree and all its changes? The workspace is not touched.")
                  )
                    send({ type: "discard", task: props.task });
                }}
              >
                Discard all
              </button>
            </>
          ) : null}
          <button class="small close-review" onClick={() => setState({ review: undefined })}>
            Close
          </button>
        </span>
      </div>
      {conflicts.size > 0 ? (
        <div class="conflicts" role="alert">
          Nothing was applied: {conflicts.size} file{conflicts.size === 1 ? " conflicts" : "s conflict"} with
          changes made in the workspace since the task started.
          <ul>
            {[...conflicts].map(([path, reason]) => (
              <li key={path} data-path={path}>
                <code>{path}</code>: {reason}
              </li>
            ))}
          </ul>
        </div>
      ) : null}
      {files.length === 0 ? <div class="empty">No changes in this task's workspace.</div> : null}
      {files.map((diff) => (
        <Diff
          key={diff.path}
          diff={diff}
          {...(inEditor ? { onOpen: () => send({ type: "file", task: props.task, path: diff.path }) } : {})}
          extra={
            <>
              {conflicts.has(diff.path) ? <span class="conflict-badge">conflict</span> : null}
              {/* Applied: the badge says so; there is nothing more to apply. */}
              {applied.has(diff.path) ? (
                <span class="applied-badge">applied</span>
              ) : (
                <button
                  class="small apply-file"
                  title="Bring this file's changes into the workspace"
                  onClick={() => send({ type: "apply", task: props.task, path: diff.path })}
                >
                  Apply<span class="long"> file</span>
                </button>
              )}
              <button
                class="small discard-file"
                title="Put this file back as it was when the task started (in the task's workspace)"
                onClick={() => send({ type: "discard", task: props.task, path: diff.path })}
              >
                Discard<span class="long"> file</span>
              </button>
            </>
          }
        />
      ))}
    </div>
  );
}

export function Review(props: {
  task: string;
  files: ReturnType<typeof getState>["review"];
}): preact.JSX.Element {
  if (props.files?.source === "task") return <TaskReview task={props.task} review={props.files} />;
  const files = props.files?.files ?? [];
  return (
    <div class="review">
      <div class="review-head">
        <span class="review-title">
          <strong>
            Changes<span class="long"> of this task</span>
          </strong>{" "}
          ({files.length} file{files.length === 1 ? "" : "s"}
          <span class="review-where">
            {props.files?.source === "git" ? ", as git sees them against HEAD" : ""}
          </span>
          )
        </span>
        <span class="review-actions">
          {files.length > 0 ? (
            <>
              <button class="revert-all danger" onClick={() => send({ type: "revert", task: props.task })}>
                Revert all
              </button>
              <button class="keep-all" onClick={() => send({ type: "keep", task: props.task })}>
                Keep
              </button>
            </>
          ) : null}
          <button class="small close-review" onClick={() => setState({ review: undefined })}>
            Close
          </button>
        </span>
      </div>
      {files.length === 0 ? <div class="empty">No changes recorded.</div> : null}
      {files.map((diff) => (
        <Diff
          key={diff.path}
          diff={diff}
          onRevert={() => send({ type: "revert", task: props.task, path: diff.path })}
          {...(inEditor ? { onOpen: () => send({ type: "file", task: props.task, path: diff.path }) } : {})}
        />
      ))}
    </div>
  );
}
