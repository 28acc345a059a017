/**
 * The Spark web app: a task list, the open task's transcript streamed live, a composer that steers
 * while the model writes, the model picker with the ⚡ toggle, and the review of a task's changes.
 */
import { render } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import type { ClientMessage, TaskStatus, TaskSummary } from "../../src/app/protocol.js";
import { Connection } from "./connection.js";
import { Entry, MarkdownSummary, Thumbnails } from "./entries.js";
import { appBase, inEditor, toEditor } from "./host.js";
import { bridgeEditor } from "./editor-bridge.js";
import { Chips, clearChips, withChips } from "./chips.js";
import { useFollowEnd } from "./follow.js";
import { Review } from "./review.js";
import { bindSend } from "./send.js";
import { TaskHeader, toggleTier } from "./task-header.js";
import { apply, getState, setState, useStore } from "./store.js";

const connection = new Connection(
  (message, receivedAt) => {
    apply(message, receivedAt);
    if (message.type === "hello") {
      // Reopen the task in the address (a reload), else the newest.
      const fromHash = new URLSearchParams(location.hash.slice(1)).get("task");
      const tasks = getState().tasks; // as the store took them from this hello
      const target = tasks.find((t) => t.id === fromHash)?.id ?? tasks[0]?.id;
      if (target) openTask(target);
      performance.mark("spark-interactive");
      // The VS Code pane times its opening to this first paint with the task list (figure: pane open).
      if (inEditor && !painted) {
        painted = true;
        requestAnimationFrame(() => requestAnimationFrame(() => toEditor({ type: "painted" })));
      }
    }
    // The pane asked for a changed file's content: VS Code's diff editor shows it.
    if (message.type === "file" && inEditor) {
      const { task, path, before, after } = message;
      toEditor({ type: "diff", task, path, before, after });
    }
    if (message.type === "task.log" && awaitingCreate && message.entries.length === 0) {
      const then = awaitingCreate.then;
      awaitingCreate = false;
      openTask(message.task);
      if (then) send(then(message.task));
    }
  },
  (state) => setState({ connection: state }),
);

let painted = false;

/** Sends to the app server; false (and a banner) when it is not connected: the caller keeps the text. */
function send(message: ClientMessage): boolean {
  if (connection.send(message)) return true;
  setState({
    error: "not connected to the app server: your text is kept in the composer; send again once connected",
  });
  return false;
}

bindSend(send);

function openTask(id: string): void {
  setState((s) => ({
    current: id,
    review: undefined,
    drawer: false,
    // Opened: its approval toast has done its job.
    toasts: s.toasts.filter((t) => !(t.kind === "approval" && t.task === id)),
  }));
  history.replaceState(null, "", `#task=${encodeURIComponent(id)}`);
  send({ type: "task.open", task: id });
}

/** A task this browser asked for: it opens once the server created it (then `then` is sent). */
let awaitingCreate: false | { then?: (task: string) => ClientMessage } = false;

/**
 * "+ New task": the empty composer of a task not created yet. The task is created with its first
 * message, so the list never fills with empty "New task" entries.
 */
function newTask(): void {
  setState({ current: undefined, review: undefined, drawer: false, draftModel: currentModel() });
  history.replaceState(null, "", location.pathname + location.search);
  requestAnimationFrame(() => document.querySelector<HTMLTextAreaElement>("textarea.input")?.focus());
}

/** The first message of a new task: the server creates it with this text, and it opens. */
function createTask(model: string, text: string, variants = 1, images: string[] = []): boolean {
  if (images.length > 0) {
    // A first message with images: the task is created empty, then sent the message.
    if (!send({ type: "task.create", model })) return false;
    awaitingCreate = { then: (task) => ({ type: "send", task, text, images }) };
    return true;
  }
  if (variants > 1) {
    // Variants are asked of an existing task: created empty, then asked.
    if (!send({ type: "task.create", model })) return false;
    awaitingCreate = { then: (task) => ({ type: "variants", task, count: variants, text }) };
    return true;
  }
  if (!send({ type: "task.create", model, text })) return false;
  awaitingCreate = {};
  return true;
}

const STATE_LABEL: Record<string, string> = {
  idle: "new",
  queued: "queued",
  running: "running",
  approval: "waiting for approval",
  done: "done",
  incomplete: "cut off",
  failed: "failed",
  interrupted: "stopped",
};

function Sidebar(props: { tasks: TaskSummary[]; current: string | undefined }): preact.JSX.Element {
  return (
    <aside class="sidebar">
      <div class="brand">⚡ Spark</div>
      <button class="new-task primary" onClick={() => newTask()}>
        + New task
      </button>
      <ul class="task-list">
        {props.tasks.map((task) => (
          <li
            key={task.id}
            // `state-…`: a bare state name would take that name's styles (`.approval` is the approval card).
            class={`task-item${task.id === props.current ? " current" : ""} state-${task.state}`}
            data-task={task.id}
            onClick={() => openTask(task.id)}
          >
            <div class="task-title" title={task.title}>
              {task.background ? (
                <span class="bg" title="background task">
                  ◐{" "}
                </span>
              ) : null}
              {task.title}
            </div>
            <div class="task-meta">
              <span class={`tier ${task.model}`}>{task.model}</span>
              <span class="state" title={task.cutOff ? `cut off: ${task.cutOff}` : undefined}>
                {STATE_LABEL[task.state] ?? task.state}
              </span>
              {task.changedFiles.length > 0 ? (
                <span class="files">
                  {task.changedFiles.length} file{task.changedFiles.length === 1 ? "" : "s"}
                </span>
              ) : null}
            </div>
          </li>
        ))}
      </ul>
    </aside>
  );
}

function currentModel(): string {
  const s = getState();
  return s.tasks.find((t) => t.id === s.current)?.model ?? "spark";
}

function band(fraction: number): string {
  return fraction < 0.3 ? "green" : fraction < 0.6 ? "cyan" : fraction < 0.8 ? "yellow" : "red";
}

function StatusBar(props: { status: TaskStatus | undefined; task: TaskSummary }): preact.JSX.Element {
  const status = props.status;
  const fraction = status && status.contextWindow > 0 ? status.contextTokens / status.contextWindow : 0;
  return (
    <div class="status-bar">
      <span class="figure ttft">
        TTFT {status?.ttftMs === undefined ? "–" : `${Math.round(status.ttftMs)} ms`}
      </span>
      <span class="figure tps">
        {status?.tokensPerSecond === undefined ? "– tok/s" : `${Math.round(status.tokensPerSecond)} tok/s`}
      </span>
      <span class="figure model">{status?.lastModel ?? props.task.model}</span>
      <span
        class={`context ${band(fraction)}`}
        title={`${status?.contextTokens ?? 0} of ${status?.contextWindow ?? 0} tokens`}
      >
        <span class="meter">
          <span class="fill" style={{ width: `${Math.min(100, Math.round(fraction * 100))}%` }} />
        </span>
        context {Math.round(fraction * 100)}%
      </span>
      {status && status.queued.length > 0 ? <span class="figure">{status.queued.length} queued</span> : null}
    </div>
  );
}

/** Images the composer attaches, as the app server accepts them. */
const IMAGE_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp"];
const MAX_IMAGES = 4;
const MAX_IMAGE_BYTES = 7.5 * 1024 * 1024;

/** The composer's own commands, listed in its menu with the project's custom prompts. */
const COMPOSER_COMMANDS: { name: string; description: string; argumentHint?: string }[] = [
  { name: "compact", description: "summarize the conversation to free context" },
  { name: "new", description: "a fresh context: the model no longer sees the conversation" },
  {
    name: "undo",
    description: "files back as before the last turn (or turn N); not what commands did elsewhere",
    argumentHint: "[N]",
  },
  { name: "redo", description: "take the last undo back" },
  {
    name: "variants",
    description: "N (2–10) agents in their own worktrees, side by side; pick one",
    argumentHint: "N message",
  },
];

/** The entries of the composer's `/` menu for what is typed so far (a `/word`, nothing after it). */
function menuEntries(
  text: string,
  prompts: readonly { name: string; description: string; argumentHint?: string }[],
): { name: string; description: string; argumentHint?: string; prompt: boolean }[] {
  const typed = /^\/([\w.-]*)$/.exec(text);
  if (!typed) return [];
  const prefix = typed[1]!;
  return [
    ...COMPOSER_COMMANDS.map((c) => ({ ...c, prompt: false })),
    ...prompts.map((p) => ({ ...p, prompt: true })),
  ].filter((entry) => entry.name.startsWith(prefix));
}

/** The `@word` being typed at the end of the composer's text: what follows the `@`. */
function mentionAt(text: string): string | undefined {
  return /(?:^|\s)@([\w@.+/-]*)$/.exec(text)?.[1];
}

/**
 * The composer of the open task, or (no `task`) of a new one: its first message creates it with
 * `model`. Text leaves the composer only once it was handed to the app server.
 */
function Composer(props: { task?: TaskSummary; model?: string }): preact.JSX.Element {
  const [text, setText] = useState("");
  const { context, fileMatches } = useStore();
  const menu = menuEntries(text, context?.prompts ?? []);
  // `@` completes workspace file names (the app lists them); a message's `@path`s are attached.
  const mention = mentionAt(text);
  useEffect(() => {
    if (mention !== undefined) connection.send({ type: "files", query: mention });
  }, [mention]);
  const fileMenu = mention !== undefined && fileMatches?.query === mention ? fileMatches.paths : [];
  const pickFile = (path: string): void => {
    setText(`${text.slice(0, text.length - (mention ?? "").length)}${path} `);
    ref.current?.focus();
  };
  const pick = (name: string): void => {
    setText(`/${name} `);
    ref.current?.focus();
  };
  const [variants, setVariants] = useState(1);
  const [images, setImages] = useState<string[]>([]);
  const ref = useRef<HTMLTextAreaElement>(null);
  const picker = useRef<HTMLInputElement>(null);
  const task = props.task;
  const running = task?.state === "running" || task?.state === "approval";
  /** Pasted, dropped or picked image files join the message as data URLs (at most 4). */
  const attach = (files: Iterable<File>): void => {
    for (const file of files) {
      if (!IMAGE_TYPES.includes(file.type)) continue;
      if (file.size > MAX_IMAGE_BYTES) {
        setState({ error: `${file.name || "image"}: larger than 7.5 MiB, not attached` });
        continue;
      }
      const reader = new FileReader();
      reader.onload = () => {
        const url = reader.result;
        if (typeof url === "string") setImages((list) => (list.length < MAX_IMAGES ? [...list, url] : list));
      };
      reader.readAsDataURL(file);
    }
  };
  /** Runs `deliver` with the composer's text (trimmed); the composer empties only if it was sent. */
  const take = (deliver: (value: string) => boolean): void => {
    const value = withChips(text.trim());
    if (value !== "" && deliver(value)) {
      setText("");
      clearChips();
    }
  };
  const submit = (sentAt?: number): void => {
    const value = text.trim();
    if (images.length > 0 && !value.startsWith("/")) {
      // A message with images is always a plain send (a running task gets it after this turn).
      const sent = task
        ? send({ type: "send", task: task.id, text: value, images })
        : createTask(props.model ?? "spark", value, 1, images);
      if (sent) {
        setText("");
        setImages([]);
      }
      return;
    }
    take((value) => {
      if (!task) return createTask(props.model ?? "spark", value, variants);
      if (value === "/compact") return send({ type: "compact", task: task.id });
      if (value === "/new") return send({ type: "new_context", task: task.id });
      const undoCommand = /^\/undo(?:\s+(\d+))?$/.exec(value);
      if (undoCommand) {
        const turn = undoCommand[1] === undefined ? undefined : Number(undoCommand[1]);
        return send({ type: "undo", task: task.id, ...(turn ? { turn } : {}) });
      }
      if (value === "/redo") return send({ type: "redo", task: task.id });
      const variantsCommand = /^\/variants\s+(\d+)\s+([\s\S]+)$/.exec(value);
      if (variantsCommand) {
        const count = Number(variantsCommand[1]);
        if (count < 2 || count > 10) {
          setState({ error: "/variants takes 2 to 10 variants" });
          return false;
        }
        return send({
          type: "variants",
          task: task.id,
          count,
          text: variantsCommand[2]!,
        });
      }
      if (variants > 1 && !running)
        return send({ type: "variants", task: task.id, count: variants, text: value });
      return send({ type: "send", task: task.id, text: value, ...(sentAt === undefined ? {} : { sentAt }) });
    });
  };
  return (
    <div
      class="composer"
      onDragOver={(e) => {
        if (e.dataTransfer?.types.includes("Files")) e.preventDefault();
      }}
      onDrop={(e) => {
        if (!e.dataTransfer?.files.length) return;
        e.preventDefault();
        attach(e.dataTransfer.files);
      }}
    >
      <Chips />
      {images.length > 0 ? (
        <Thumbnails
          images={images}
          onRemove={(index) => setImages((list) => list.filter((_, i) => i !== index))}
        />
      ) : null}
      {fileMenu.length > 0 ? (
        <ul class="composer-menu file-menu" role="listbox">
          {fileMenu.map((path) => (
            <li key={path}>
              <button class="menu-item" onClick={() => pickFile(path)}>
                <span class="menu-name">@{path}</span>
              </button>
            </li>
          ))}
        </ul>
      ) : null}
      {menu.length > 0 ? (
        <ul class="composer-menu" role="listbox">
          {menu.map((entry) => (
            <li key={entry.name}>
              <button class="menu-item" onClick={() => pick(entry.name)}>
                <span class="menu-name">
                  /{entry.name}
                  {entry.argumentHint ? <span class="menu-hint"> {entry.argumentHint}</span> : null}
                </span>
                <span class="menu-description">
                  {entry.description}
                  {entry.prompt ? " · custom prompt" : ""}
                </span>
              </button>
            </li>
          ))}
        </ul>
      ) : null}
      <textarea
        ref={ref}
        class="input"
        rows={3}
        placeholder={
          running
            ? "Type to steer — Enter redirects the answer now"
            : "Ask Spark… (Enter sends, Shift+Enter for a new line)"
        }
        value={text}
        onInput={(e) => setText((e.target as HTMLTextAreaElement).value)}
        onPaste={(e) => {
          const files = [...(e.clipboardData?.files ?? [])].filter((file) => IMAGE_TYPES.includes(file.type));
          if (files.length === 0) return;
          e.preventDefault();
          attach(files);
        }}
        onKeyDown={(e) => {
          if (e.key === "Tab" && fileMenu.length > 0) {
            e.preventDefault();
            pickFile(fileMenu[0]!);
          } else if (e.key === "Tab" && menu.length > 0) {
            e.preventDefault();
            pick(menu[0]!.name);
          } else if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
            e.preventDefault();
            submit(performance.timeOrigin + e.timeStamp);
          } else if (e.key === "Escape" && running && task) {
            send({ type: "stop", task: task.id });
          }
        }}
      />
      <div class="composer-actions">
        <input
          ref={picker}
          type="file"
          class="image-picker"
          accept={IMAGE_TYPES.join(",")}
          multiple
          hidden
          onChange={(e) => {
            const input = e.target as HTMLInputElement;
            if (input.files) attach(input.files);
            input.value = "";
          }}
        />
        <button
          class="attach-button"
          title="Attach an image (or paste / drop one)"
          onClick={() => picker.current?.click()}
        >
          + Image
        </button>
        {running && task ? (
          <>
            <button class="steer-button primary" onClick={() => submit()}>
              Steer
            </button>
            <button
              class="queue-button"
              title="Send after this turn"
              onClick={() => take((value) => send({ type: "queue", task: task.id, text: value }))}
            >
              Queue
            </button>
            <button class="stop-button danger" onClick={() => send({ type: "stop", task: task.id })}>
              Stop
            </button>
          </>
        ) : (
          <>
            <button class="send-button primary" onClick={() => submit()}>
              Send
            </button>
            <select
              class="variants-select"
              title="Variants: agents at once, each in its own worktree"
              value={String(variants)}
              onChange={(e) => setVariants(Number((e.target as HTMLSelectElement).value))}
            >
              <option value="1">1 answer</option>
              {[2, 3, 4, 5, 6, 7, 8, 9, 10].map((n) => (
                <option key={n} value={String(n)}>
                  {n} variants
                </option>
              ))}
            </select>
          </>
        )}
        <button
          class="background-button"
          title="Hand this to the deep tier in the background; keep working here"
          onClick={() =>
            take((value) => send({ type: "task.create", model: "deep", text: value, background: true }))
          }
        >
          ◐ <span class="long">Background (deep)</span>
          <span class="short">Deep</span>
        </button>
        {task ? (
          <>
            <button class="small" title="/compact" onClick={() => send({ type: "compact", task: task.id })}>
              Compact
            </button>
            <button class="small" title="/new" onClick={() => send({ type: "new_context", task: task.id })}>
              New <span class="long">context</span>
            </button>
          </>
        ) : null}
      </div>
    </div>
  );
}

function Transcript(props: { task: string }): preact.JSX.Element {
  const state = useStore();
  const entries = state.logs[props.task];
  const ref = useRef<HTMLDivElement>(null);
  // Follows the end unless the user scrolled up (follow.ts).
  useFollowEnd(ref, props.task);
  return (
    <div class="transcript" ref={ref}>
      {entries === undefined ? <div class="empty">Loading…</div> : null}
      {entries?.length === 0 ? <div class="empty">Ask something to start this task.</div> : null}
      {entries?.map((entry) => (
        <Entry key={entry.id} entry={entry} task={props.task} send={send} />
      ))}
    </div>
  );
}

function Login(): preact.JSX.Element {
  const [key, setKey] = useState("");
  const [error, setError] = useState("");
  return (
    <form
      class="login"
      onSubmit={(e) => {
        e.preventDefault();
        void fetch(new URL("/app/login", appBase), {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ key }),
        }).then(async (response) => {
          if (response.ok) {
            setKey("");
            connection.open();
          } else {
            const body = (await response.json().catch(() => ({}))) as { error?: { message?: string } };
            setError(body.error?.message ?? `sign-in failed (HTTP ${response.status})`);
          }
        });
      }}
    >
      <h1>⚡ Spark</h1>
      <p>This app runs commands on its machine. Sign in with its API key.</p>
      <input
        type="password"
        autocomplete="current-password"
        value={key}
        onInput={(e) => setKey((e.target as HTMLInputElement).value)}
      />
      <button class="primary" type="submit">
        Sign in
      </button>
      {error ? <div class="error">{error}</div> : null}
    </form>
  );
}

const TOAST_STATE: Record<string, string> = {
  done: "finished",
  incomplete: "cut off",
  failed: "failed",
  interrupted: "stopped",
};

function App(): preact.JSX.Element {
  const state = useStore();
  const task = state.tasks.find((t) => t.id === state.current);
  useEffect(() => {
    const onKey = (e: KeyboardEvent): void => {
      // In VS Code the editor's own keybinding toggles its one tier, and the pane follows it.
      if (!inEditor && (e.ctrlKey || e.metaKey) && e.shiftKey && e.key.toLowerCase() === "l") {
        e.preventDefault();
        const s = getState();
        const current = s.tasks.find((t) => t.id === s.current);
        if (current) toggleTier(current);
      }
    };
    window.addEventListener("keydown", onKey);
    return () => window.removeEventListener("keydown", onKey);
  }, []);
  if (state.connection === "unauthenticated") return <Login />;
  const server = state.server;
  return (
    <div class={`layout${state.drawer ? " drawer-open" : ""}`}>
      <Sidebar tasks={state.tasks} current={state.current} />
      {/* Narrow screens: the task list is a drawer over the page; this closes it. */}
      <div class="drawer-backdrop" onClick={() => setState({ drawer: false })} />
      <main class="main">
        <div class="topbar">
          <button
            class="drawer-toggle"
            title="Tasks"
            aria-label="Tasks"
            onClick={() => setState((s) => ({ drawer: !s.drawer }))}
          >
            ☰
          </button>
          <span class="brand">⚡ Spark</span>
          <span class="topbar-title">{task?.title ?? "New task"}</span>
          <button class="new-task-top" title="New task" aria-label="New task" onClick={() => newTask()}>
            +
          </button>
        </div>
        {state.connection !== "open" ? <div class="banner">Connecting to the app server…</div> : null}
        {server && !server.reachable ? (
          <div class="banner server-down" role="status">
            The Spark server at {server.url} is unreachable ({server.error ?? "no answer"}). Messages you send
            wait in their task and go out once it answers; start it with <code>spark serve</code>.
          </div>
        ) : null}
        {state.error ? (
          <div class="banner error" onClick={() => setState({ error: undefined })}>
            {state.error}
          </div>
        ) : null}
        {task ? (
          <>
            <TaskHeader key={task.id} task={task} models={state.models} status={state.statuses[task.id]} />
            {state.review?.task === task.id ? <Review task={task.id} files={state.review} /> : null}
            <Transcript task={task.id} />
            <StatusBar status={state.statuses[task.id]} task={task} />
            <Composer key={task.id} task={task} />
          </>
        ) : (
          <>
            <div class="welcome">
              <div class="welcome-head">
                <h1>⚡ Spark</h1>
                <p class="workspace">{state.workspace}</p>
                <p class="hint">What should we do in this workspace? Your first message starts a new task.</p>
                <label class="draft-model">
                  Tier{" "}
                  <select
                    class="model-select"
                    value={state.draftModel}
                    onChange={(e) => setState({ draftModel: (e.target as HTMLSelectElement).value })}
                  >
                    {state.models.map((m) => (
                      <option key={m} value={m}>
                        {m}
                      </option>
                    ))}
                  </select>
                </label>
              </div>
              <Composer key="draft" model={state.draftModel} />
            </div>
          </>
        )}
      </main>
      <div class="toasts">
        {state.toasts.map((toast) => (
          <div key={toast.id} class={`toast kind-${toast.kind} state-${toast.state}`} data-task={toast.task}>
            <strong>
              {toast.kind === "approval"
                ? "Waiting for approval"
                : `Background task ${TOAST_STATE[toast.state] ?? toast.state}`}
              : {toast.title}
            </strong>
            <MarkdownSummary class="toast-text" text={toast.text} />
            <div class="toast-actions">
              {toast.kind === "approval" ? (
                <button class="primary open-task" onClick={() => openTask(toast.task)}>
                  Open
                </button>
              ) : (
                <button
                  onClick={() => {
                    openTask(toast.task);
                    send({ type: "review", task: toast.task });
                    setState((s) => ({ toasts: s.toasts.filter((t) => t.id !== toast.id) }));
                  }}
                >
                  Review
                </button>
              )}
              <button
                class="small"
                onClick={() => setState((s) => ({ toasts: s.toasts.filter((t) => t.id !== toast.id) }))}
              >
                Dismiss
              </button>
            </div>
          </div>
        ))}
      </div>
    </div>
  );
}

// In the VS Code pane: what the editor asks of the app, and paths that open in the editor.
bridgeEditor();

// The socket first: its handshake overlaps the first render (the hello it brings is what makes the
// page interactive, figure 21).
connection.open();
render(<App />, document.getElementById("root")!);
