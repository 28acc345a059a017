/** The transcript: one component per entry kind (messages, tool activity, approvals, variants). */
import { Component } from "preact";
import { Diff } from "./diff.js";
import { Variants } from "./variants.js";
import { useEffect, useRef, useState } from "preact/hooks";
import type { ClientMessage, FileDiff, LogEntry } from "../../src/app/protocol.js";
import { renderInto, StreamingMarkdown } from "./markdown.js";
import { attachStream, benchProbe, detachStream } from "./store.js";

type Send = (message: ClientMessage) => void;

type EntryProps = { entry: LogEntry; task: string; send: Send };

/**
 * One transcript entry, re-rendered only when it changed: the store replaces a changed entry's
 * object and keeps the others, so a streaming variant card's update does not redraw the transcript.
 */
export class Entry extends Component<EntryProps> {
  override shouldComponentUpdate(next: EntryProps): boolean {
    return next.entry !== this.props.entry || next.task !== this.props.task || next.send !== this.props.send;
  }

  override render(): preact.JSX.Element | null {
    return <EntryView {...this.props} />;
  }
}

function EntryView(props: EntryProps): preact.JSX.Element | null {
  const { entry } = props;
  switch (entry.kind) {
    case "user":
      return (
        <div
          class={`msg user${entry.steer ? " steer" : ""}${entry.pending ? " pending" : ""}`}
          data-entry={entry.id}
        >
          {entry.steer ? <span class="badge">steer</span> : null}
          {entry.pending ? (
            <span class="badge waiting" title="the Spark server is unreachable: sent once it answers">
              waiting for the server
            </span>
          ) : null}
          {entry.text ? <div class="text">{entry.text}</div> : null}
          {entry.images?.length ? <Thumbnails images={entry.images} /> : null}
        </div>
      );
    case "assistant":
      return <Assistant entry={entry} />;
    case "item":
      return <Item entry={entry} />;
    case "approval":
      return <Approval entry={entry} task={props.task} send={props.send} />;
    case "notice":
      return (
        <div class={`notice ${entry.level}`} data-entry={entry.id}>
          {entry.text}
        </div>
      );
    case "variants":
      return <Variants entry={entry} task={props.task} send={props.send} />;
  }
}

function Assistant(props: { entry: Extract<LogEntry, { kind: "assistant" }> }): preact.JSX.Element {
  const { entry } = props;
  const ref = useRef<HTMLDivElement>(null);
  const renderer = useRef<StreamingMarkdown | undefined>(undefined);
  useEffect(() => {
    const root = ref.current!;
    if (!entry.streaming) {
      renderInto(root, entry.text);
      return;
    }
    const probe = benchProbe();
    const markdown = new StreamingMarkdown(
      root,
      probe ? (received, paintedAt) => probe.lags.push(...received.map((r) => paintedAt - r)) : undefined,
    );
    renderer.current = markdown;
    const buffered = attachStream(entry.id, markdown);
    if (buffered !== "") markdown.append(buffered);
    return () => detachStream(entry.id);
    // Mounted once per entry: later changes arrive as deltas or as the finished entry below.
  }, [entry.id]);
  useEffect(() => {
    if (!entry.streaming && renderer.current) {
      renderer.current.finish(entry.text);
      renderer.current = undefined;
      detachStream(entry.id);
    }
  }, [entry.streaming, entry.text]);
  return (
    <div class="msg assistant" data-entry={entry.id} data-streaming={entry.streaming ? "true" : "false"}>
      {entry.model ? <div class="model">{entry.model}</div> : null}
      <div class="markdown" ref={ref} />
      {entry.cutOff ? <div class="cut-off">cut off: {entry.cutOff}</div> : null}
    </div>
  );
}

/** A short Markdown text (a toast's summary), rendered and sanitized like an answer. */
export function MarkdownSummary(props: { text: string; class?: string }): preact.JSX.Element {
  const ref = useRef<HTMLDivElement>(null);
  useEffect(() => {
    if (ref.current) renderInto(ref.current, props.text);
  }, [props.text]);
  return <div class={`markdown ${props.class ?? ""}`} ref={ref} />;
}

function Item(props: { entry: Extract<LogEntry, { kind: "item" }> }): preact.JSX.Element {
  const { item } = props.entry;
  switch (item.type) {
    case "command_execution":
      return (
        <div class={`tool command ${item.status}`} data-entry={props.entry.id}>
          <div class="tool-head">
            <span class="prompt">$</span> <code>{item.command}</code>
            <span class="status">
              {item.status === "in_progress"
                ? "running…"
                : item.status === "declined"
                  ? "declined"
                  : `exit ${item.exit_code ?? "?"}`}
            </span>
          </div>
          {item.aggregated_output ? <pre class="output">{item.aggregated_output}</pre> : null}
        </div>
      );
    case "file_change":
      return (
        <div class={`tool patch ${item.status}`} data-entry={props.entry.id}>
          <div class="tool-head">
            ✎{" "}
            {item.changes.map((c, i) => (
              <span key={c.path}>
                {i > 0 ? ", " : ""}
                {c.kind} <code>{c.path}</code>
              </span>
            ))}
            <span class="status">{item.status === "in_progress" ? "applying…" : item.status}</span>
          </div>
          {item.error ? <div class="error">{item.error}</div> : null}
          {props.entry.diffs?.length ? <PatchDiffs diffs={props.entry.diffs} /> : null}
        </div>
      );
    case "tool_call":
      return (
        <details class={`tool call ${item.status}`} data-entry={props.entry.id}>
          <summary>
            {item.tool} <code>{item.arguments.slice(0, 120)}</code>
            <span class="status">{item.status}</span>
          </summary>
          {item.result ? <pre class="output">{item.result}</pre> : null}
        </details>
      );
    case "error":
      return <div class="notice error">{item.message}</div>;
    case "agent_message":
      return <div class="msg assistant">{item.text}</div>;
  }
}

/** An applied patch's diff in the transcript: collapsed to its +/- counts, opened on a click. */
function PatchDiffs(props: { diffs: readonly FileDiff[] }): preact.JSX.Element {
  const added = props.diffs.reduce((sum, diff) => sum + diff.added, 0);
  const removed = props.diffs.reduce((sum, diff) => sum + diff.removed, 0);
  return (
    <details class="patch-diffs">
      <summary>
        diff{" "}
        <span class="counts">
          <span class="add">+{added}</span> <span class="del">−{removed}</span>
        </span>
      </summary>
      {props.diffs.map((diff) => (
        <Diff key={diff.path} diff={diff} />
      ))}
    </details>
  );
}

function Approval(props: {
  entry: Extract<LogEntry, { kind: "approval" }>;
  task: string;
  send: Send;
}): preact.JSX.Element {
  const { entry } = props;
  const [reason, setReason] = useState("");
  const answer = (value: "yes" | "always" | "no"): void =>
    props.send({
      type: "approval",
      task: props.task,
      entry: entry.id,
      answer: value,
      ...(value === "no" && reason.trim() ? { reason: reason.trim() } : {}),
    });
  return (
    <div class={`approval${entry.answer ? " answered" : ""}`} data-entry={entry.id}>
      <div class="approval-head">
        {entry.request.kind === "command"
          ? "Run this command?"
          : entry.request.kind === "tool"
            ? "Call this tool?"
            : "Apply this patch?"}
      </div>
      <code class="summary">{entry.request.summary}</code>
      {entry.request.reason ? <div class="reason">{entry.request.reason}</div> : null}
      {/* Diff-first: open until answered, then collapsed like the applied patch below it. */}
      {entry.request.diffs?.length ? (
        entry.answer ? (
          <PatchDiffs diffs={entry.request.diffs} />
        ) : (
          <div class="approval-diffs">
            {entry.request.diffs.map((diff) => (
              <Diff key={diff.path} diff={diff} />
            ))}
          </div>
        )
      ) : null}
      {entry.answer ? (
        <div class="answer">
          {entry.answer === "no"
            ? `Denied${entry.denyReason ? `: ${entry.denyReason}` : ""}`
            : entry.answer === "always"
              ? "Approved for this session"
              : "Approved once"}
        </div>
      ) : (
        <div class="actions">
          <button class="primary" onClick={() => answer("yes")}>
            Approve once
          </button>
          <button onClick={() => answer("always")}>Approve always</button>
          <input
            class="deny-reason"
            placeholder="reason (optional)"
            value={reason}
            onInput={(e) => setReason((e.target as HTMLInputElement).value)}
          />
          <button class="danger" onClick={() => answer("no")}>
            Deny
          </button>
        </div>
      )}
    </div>
  );
}

/**
 * Images the user attached, drawn by the app itself from data URLs (model answers go through
 * DOMPurify, which keeps no <img>; the page's CSP allows `img-src data:` for these).
 */
export function Thumbnails(props: {
  images: readonly string[];
  onRemove?: (index: number) => void;
}): preact.JSX.Element {
  return (
    <div class="thumbnails">
      {props.images.map((url, index) =>
        /^data:image\/(png|jpeg|gif|webp);base64,/.test(url) ? (
          <span class="thumbnail" key={index}>
            <img src={url} alt={`attached image ${index + 1}`} />
            {props.onRemove ? (
              <button
                class="thumbnail-remove"
                title="Remove this image"
                onClick={() => props.onRemove!(index)}
              >
                ×
              </button>
            ) : null}
          </span>
        ) : null,
      )}
    </div>
  );
}
