/**
 * Best-of-N in the transcript: the variants' cards side by side, each with its state, figures,
 * files, the check's result, its live preview and the end of its answer; Pick and Discard all.
 */
import { useEffect, useRef, useState } from "preact/hooks";
import type { ClientMessage, LogEntry, VariantCard } from "../../src/app/protocol.js";
import { Diff } from "./diff.js";
import { renderInto } from "./markdown.js";
import { attachStream, benchProbe, detachStream, getState, useStore, variantStream } from "./store.js";

type Send = (message: ClientMessage) => void;

export function Variants(props: {
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
            task={props.task}
            send={props.send}
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
  task: string;
  send: Send;
}): preact.JSX.Element {
  const { card, index, entry } = props;
  const [open, setOpen] = useState(false);
  // Open: asked again whenever the variant's files change (it is still writing).
  const signature = card.files.map((f) => `${f.path}:${f.added}:${f.removed}`).join("|");
  useEffect(() => {
    if (open) props.send({ type: "variant.diff", task: props.task, entry: entry.id, index });
  }, [open, signature]);
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
      {/* Its diff, per file (each collapsed), asked of the app when opened and whenever it changes. */}
      <details
        class="variant-diff"
        onToggle={(event) => setOpen((event.currentTarget as HTMLDetailsElement).open)}
      >
        <summary
          class="variant-files"
          title={card.files.map((f) => `${f.path} +${f.added} −${f.removed}`).join("\n")}
        >
          {card.files.length} file{card.files.length === 1 ? "" : "s"} <span class="add">+{card.added}</span>{" "}
          <span class="del">−{card.removed}</span>
          {card.files.length > 0 ? (
            <span class="variant-paths"> {card.files.map((f) => f.path).join(", ")}</span>
          ) : null}
        </summary>
        {open ? <VariantDiffs entry={entry.id} index={index} /> : null}
      </details>
      {/* The check's result; its output on a click. */}
      {check ? (
        <details class={`variant-check ${check.state}`}>
          <summary>
            {check.state === "running"
              ? "check running…"
              : check.state === "passed"
                ? "✓ check passed"
                : `✗ check failed${check.timedOut ? " (timed out)" : check.exitCode === null ? "" : ` (exit ${check.exitCode})`}`}
          </summary>
          <pre class="variant-check-output">{check.outputTail || "(no output)"}</pre>
        </details>
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

/** A variant's diff as the app answered it: one collapsed entry per file, its lines inside. */
function VariantDiffs(props: { entry: string; index: number }): preact.JSX.Element {
  const diffs = useStore().variantDiffs[variantStream(props.entry, props.index)];
  if (diffs === undefined) return <div class="variant-diff-empty">loading…</div>;
  if (diffs.length === 0) return <div class="variant-diff-empty">no changes</div>;
  return (
    <div class="variant-diff-files">
      {diffs.map((diff) => (
        <details key={diff.path} class="variant-file" data-path={diff.path}>
          <summary>
            <code>{diff.path}</code> <span class="add">+{diff.added}</span>{" "}
            <span class="del">−{diff.removed}</span>
          </summary>
          <Diff diff={diff} bare />
        </details>
      ))}
    </div>
  );
}

/**
 * The end of a variant's answer as Markdown (sanitized, as the transcript's), painted once per
 * animation frame while it streams, with no re-render of the card.
 */
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
      renderInto(element, tail(entry.texts[index] ?? ""));
      return;
    }
    const key = variantStream(entry.id, index);
    let text = "";
    let frame = 0;
    const probe = benchProbe();
    let received: number[] = [];
    const paint = (): void => {
      frame = 0;
      renderInto(element, tail(text));
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
  return <div class="variant-text markdown" ref={ref} />;
}

/** What a card shows of a long answer: its end. */
function tail(text: string): string {
  return text.length > 700 ? `…${text.slice(-700)}` : text;
}
