/** A file's diff: its path, kind and +/- counts, its lines; Revert, Open (VS Code) and extra buttons. */
import type { FileDiff } from "../../src/app/protocol.js";

export function Diff(props: {
  diff: FileDiff;
  onRevert?: () => void;
  /** The VS Code pane: show it in the editor's diff view. */
  onOpen?: () => void;
  /** More of the file's head (the review of a task in a worktree: its state and Apply / Discard). */
  extra?: preact.ComponentChildren;
  /** Its lines only: the path and counts are shown beside it already. */
  bare?: boolean;
}): preact.JSX.Element {
  const { diff } = props;
  return (
    <div class="diff" data-path={diff.path}>
      <div class="diff-head" hidden={props.bare}>
        <span class={`kind ${diff.kind}`}>{diff.kind}</span>{" "}
        <code class="diff-path" title={diff.path}>
          {diff.path}
        </code>
        <span class="counts">
          <span class="add">+{diff.added}</span> <span class="del">−{diff.removed}</span>
        </span>
        {props.onOpen ? (
          <button class="small open-diff" title="Show it in VS Code's diff editor" onClick={props.onOpen}>
            Open<span class="long"> diff</span>
          </button>
        ) : null}
        {props.onRevert ? (
          <button class="small" onClick={props.onRevert}>
            Revert<span class="long"> file</span>
          </button>
        ) : null}
        {props.extra}
      </div>
      <pre class="diff-body">
        {diff.lines.map((line, i) => (
          <div key={i} class={`line ${line.kind}`}>
            {line.kind === "add" ? "+" : line.kind === "del" ? "-" : line.kind === "hunk" ? "" : " "}
            {line.text}
          </div>
        ))}
        {diff.note ? <div class="line note">{diff.note}</div> : null}
      </pre>
    </div>
  );
}
