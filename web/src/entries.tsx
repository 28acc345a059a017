/** The transcript: one component per entry kind (messages, tool activity, approvals, variants). */
import { Component } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import type { ClientMessage, FileDiff, LogEntry, VariantCard } from "../../src/app/protocol.js";
import { renderInto, StreamingMarkdown } from "./markdown.js";
import { attachStream, benchProbe, detachStream, getState, variantStream } from "./store.js";

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

export function Diff(props: {
  diff: FileDiff;
  onRevert?: () => void;
  /** The VS Code pane: show it in the editor's diff view. */
  onOpen?: () => void;
  /** More of the file's head (the review of a task in a worktree: its state and Apply / Discard). */
  extra?: preact.ComponentChildren;
}): preact.JSX.Element {
  const { diff } = props;
  return (
    <div class="diff" data-path={diff.path}>
      <div class="diff-head">
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

function Variants(props: {
  entry: Extract<LogEntry, { kind: "variants" }>;
  task: string;
  send: Send;
}): preact.JSX.Element {
  const { entry } = props;
  const cards = entry.cards;
  if (!cards) {
    // Saved before variants were agent runs: text answers only.
    return (
      <div class="variants" data-entry={entry.id}>
        <div class="variants-head">
          {entry.texts.length} variants of “{entry.prompt}”{entry.done ? "" : " (writing…)"}
        </div>
        <div class="variant-grid">
          {entry.texts.map((text, index) => (
            <div key={index} class={`variant${entry.chosen === index ? " chosen" : ""}`}>
              <div class="variant-text">{text}</div>
            </div>
          ))}
        </div>
      </div>
    );
  }
  const running = cards.filter(
    (c) => c.state === "running" || c.state === "starting" || c.state === "checking",
  );
  const queued = cards.filter((c) => c.state === "queued" || c.serverQueued);
  const open = entry.done && entry.chosen === undefined && cards.some((c) => c.state === "done");
  return (
    <div class="variants" data-entry={entry.id} data-done={entry.done ? "true" : "false"}>
      <div class="variants-head">
        <span>
          {cards.length} variants of “{entry.prompt}”
          {entry.done
            ? entry.chosen === undefined
              ? ""
              : ` · picked #${entry.chosen + 1}`
            : ` · ${running.length} running${queued.length > 0 ? `, ${queued.length} queued` : ""}`}
        </span>
        {!entry.done ? (
          <button class="variants-stop" onClick={() => props.send({ type: "stop", task: props.task })}>
            Stop all
          </button>
        ) : open ? (
          <button
            class="variants-discard"
            onClick={() => props.send({ type: "variants.discard", task: props.task, entry: entry.id })}
          >
            Discard all
          </button>
        ) : null}
      </div>
      <div class="variant-cards">
        {cards.map((card, index) => (
          <VariantCardView
            key={index}
            entry={entry}
            card={card}
            index={index}
            pickable={open && card.state === "done"}
            onPick={() => props.send({ type: "choose", task: props.task, entry: entry.id, index })}
          />
        ))}
      </div>
    </div>
  );
}

const VARIANT_STATE: Record<VariantCard["state"], string> = {
  queued: "queued",
  starting: "starting",
  running: "running",
  checking: "checking",
  done: "done",
  failed: "failed",
  cancelled: "stopped",
  picked: "picked",
  discarded: "discarded",
};

function VariantCardView(props: {
  entry: Extract<LogEntry, { kind: "variants" }>;
  card: VariantCard;
  index: number;
  pickable: boolean;
  onPick: () => void;
}): preact.JSX.Element {
  const { card, index, entry } = props;
  const label =
    card.serverQueued && card.state === "running" ? "queued on the server" : VARIANT_STATE[card.state];
  const check = card.check;
  return (
    <div
      class={`variant-card state-${card.state}${entry.chosen === index ? " chosen" : ""}`}
      data-index={index}
      data-state={card.state}
      data-ended-at={card.endedAt}
    >
      <div class="variant-top">
        <span class="variant-number">#{index + 1}</span>
        <span class="variant-temperature" title="sampling temperature">
          T {card.temperature.toFixed(2)}
        </span>
        <span class={`variant-state ${card.state}`}>{label}</span>
        {card.tokensPerSecond === undefined ? null : (
          <span class="variant-rate">{card.tokensPerSecond} tok/s</span>
        )}
      </div>
      <div
        class="variant-files"
        title={card.files.map((f) => `${f.path} +${f.added} −${f.removed}`).join("\n")}
      >
        {card.files.length} file{card.files.length === 1 ? "" : "s"} <span class="add">+{card.added}</span>{" "}
        <span class="del">−{card.removed}</span>
        {card.files.length > 0 ? (
          <span class="variant-paths"> {card.files.map((f) => f.path).join(", ")}</span>
        ) : null}
      </div>
      {check ? (
        <div class={`variant-check ${check.state}`} title={check.outputTail}>
          {check.state === "running"
            ? "check running…"
            : check.state === "passed"
              ? "✓ check passed"
              : `✗ check failed${check.timedOut ? " (timed out)" : check.exitCode === null ? "" : ` (exit ${check.exitCode})`}`}
        </div>
      ) : null}
      {card.preview ? <Preview preview={card.preview} index={index} /> : null}
      <VariantText entry={entry} index={index} />
      {card.error ? <div class="variant-error">{card.error}</div> : null}
      {props.pickable ? (
        <button class="primary variant-pick" onClick={props.onPick}>
          Pick this one
        </button>
      ) : null}
    </div>
  );
}

/**
 * The page a variant wrote, framed from the app's preview server: another origin (another loopback
 * name than the app's, its own port) in a sandbox without `allow-same-origin`, so its script
 * reaches neither this page, its cookie nor its socket. A new `version` reloads it.
 */
function Preview(props: {
  preview: NonNullable<VariantCard["preview"]>;
  index: number;
}): preact.JSX.Element | null {
  const port = getState().preview;
  if (port === undefined) return null;
  const host = location.hostname === "localhost" ? "127.0.0.1" : "localhost";
  const path = props.preview.path.split("/").map(encodeURIComponent).join("/");
  const src = `http://${host}:${port}/${props.preview.token}/${path}?v=${props.preview.version}`;
  return (
    <iframe
      class="variant-preview"
      sandbox="allow-scripts"
      src={src}
      title={`variant ${props.index + 1}: ${props.preview.path}`}
      data-version={props.preview.version}
      onLoad={() => benchProbe()?.previews.push({ src, at: performance.timeOrigin + performance.now() })}
    />
  );
}

/** The tail of a variant's text: streamed into the element once per animation frame, no re-render. */
function VariantText(props: {
  entry: Extract<LogEntry, { kind: "variants" }>;
  index: number;
}): preact.JSX.Element {
  const { entry, index } = props;
  const ref = useRef<HTMLDivElement>(null);
  const streaming = !entry.done;
  useEffect(() => {
    const element = ref.current!;
    if (!streaming) {
      element.textContent = tail(entry.texts[index] ?? "");
      return;
    }
    const key = variantStream(entry.id, index);
    let text = "";
    let frame = 0;
    const probe = benchProbe();
    let received: number[] = [];
    const paint = (): void => {
      frame = 0;
      element.textContent = tail(text);
      if (probe && received.length > 0) {
        const now = performance.now();
        probe.lags.push(...received.map((r) => now - r));
        received = [];
      }
    };
    const schedule = (): void => {
      if (frame === 0) frame = requestAnimationFrame(paint);
    };
    text = attachStream(key, {
      append(delta, receivedAt) {
        text += delta;
        if (probe) received.push(receivedAt);
        schedule();
      },
      reset(whole) {
        text = whole;
        schedule();
      },
    });
    schedule();
    return () => {
      cancelAnimationFrame(frame);
      detachStream(key);
    };
  }, [entry.id, index, streaming]);
  return <div class="variant-text" ref={ref} />;
}

/** What a card shows of a long answer: its end. */
function tail(text: string): string {
  return text.length > 700 ? `…${text.slice(-700)}` : text;
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
