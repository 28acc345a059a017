/**
 * Images, routed and never dropped: `input_image` (Responses, HTTP and WebSocket) and `image_url`
 * (Chat Completions) reach a model that can see, or are refused with `image_unsupported`. The
 * models are openai-engine entries against fake upstreams on 127.0.0.1 (real HTTP, only the
 * network boundary is simulated), one text-only and two that see (one per upstream wire API).
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import { writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { ConfigError, resolveSettings } from "../src/settings/config.js";
import { createModels } from "../src/cli/create-engine.js";
import type { EngineRequest } from "../src/engine/types.js";
import { LlamaEngine } from "../src/engines/llama/llama-engine.js";
import { SparkError } from "../src/protocol/errors.js";
import { SparkServer } from "../src/server/http-server.js";
import { file, firstLine, freshDir, jsonLines, runToExit, spawnCli, stop } from "./helpers/cli.js";
import { launchBrowser } from "./helpers/browser.js";
import { MODEL_SKIP_MESSAGE, testModelPath } from "./helpers/model.js";
import { distMissing, TmuxServer, tmuxMissing } from "./helpers/tmux.js";
import { WsClient } from "./helpers/ws-client.js";

/** A 1x1 PNG. */
const PNG =
  "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

interface Upstream {
  baseUrl: string;
  /** Bodies of the generation requests it received, parsed. */
  bodies: Record<string, unknown>[];
  close(): Promise<void>;
}

/** A fake upstream that answers every generation with `answer` over the chat or responses wire. */
async function startUpstream(api: "chat" | "responses", answer: string): Promise<Upstream> {
  const bodies: Record<string, unknown>[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      if (req.url === "/v1/models") {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ object: "list", data: [{ id: `${api}-model`, object: "model" }] }));
        return;
      }
      bodies.push(JSON.parse(Buffer.concat(chunks).toString("utf8")) as Record<string, unknown>);
      res.writeHead(200, { "content-type": "text/event-stream" });
      if (api === "chat") {
        const chunk = (delta: object, finish: string | null) => ({
          id: "c1",
          object: "chat.completion.chunk",
          choices: [{ index: 0, delta, finish_reason: finish }],
        });
        const events = [chunk({ role: "assistant", content: answer }, null), chunk({}, "stop")];
        res.end(events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join("") + "data: [DONE]\n\n");
      } else {
        const usage = { input_tokens: 5, output_tokens: 2, total_tokens: 7 };
        const events = [
          { type: "response.created", response: { id: "r1" } },
          { type: "response.output_item.added", output_index: 0, item: { id: "m1", type: "message" } },
          {
            type: "response.output_text.delta",
            item_id: "m1",
            output_index: 0,
            content_index: 0,
            delta: answer,
          },
          { type: "response.output_item.done", output_index: 0, item: { id: "m1", type: "message" } },
          { type: "response.completed", response: { id: "r1", status: "completed", usage } },
        ];
        res.end(events.map((e) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`).join(""));
      }
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    bodies,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

let text: Upstream;
let eyes: Upstream;
let eyesResponses: Upstream;
let server: SparkServer;
let url: string;
const logLines: string[] = [];

before(async () => {
  text = await startUpstream("chat", "text only here");
  eyes = await startUpstream("chat", "I see a red pixel");
  eyesResponses = await startUpstream("responses", "a pixel, seen over responses");
  const config = file(
    "images-config.json",
    JSON.stringify({
      models: {
        spark: { engine: "openai", upstream: text.baseUrl },
        deep: { engine: "openai", upstream: text.baseUrl, tier: "deep" },
        eyes: { engine: "openai", upstream: eyes.baseUrl, vision: true },
        "eyes-responses": {
          engine: "openai",
          upstream: eyesResponses.baseUrl,
          upstreamApi: "responses",
          vision: true,
          tier: "deep",
        },
      },
    }),
  );
  const models = await createModels(resolveSettings({ config }, {}), () => {});
  await Promise.all(models.engines().map((engine) => engine.start()));
  server = new SparkServer({ models, port: 0, log: (line) => logLines.push(line) });
  await server.listen();
  url = server.url;
});

after(async () => {
  await server.close();
  await Promise.all([text.close(), eyes.close(), eyesResponses.close()]);
});

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- response shapes are asserted field by field
type Json = any;

async function post(path: string, body: object): Promise<{ status: number; headers: Headers; json: Json }> {
  const response = await fetch(`${url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: response.status, headers: response.headers, json: await response.json() };
}

const imageInput = (image = PNG) => [
  {
    role: "user",
    content: [
      { type: "input_text", text: "What is in this picture?" },
      { type: "input_image", image_url: image, detail: "low" },
    ],
  },
];

test("Responses: an image to auto goes to the model that sees (rule image_input), and its upstream gets the image", async () => {
  const before = eyes.bodies.length;
  const { status, headers, json } = await post("/v1/responses", { model: "auto", input: imageInput() });
  assert.equal(status, 200, JSON.stringify(json));
  assert.equal(json.model, "eyes");
  assert.equal(json.output[0].content[0].text, "I see a red pixel");
  assert.equal(headers.get("x-spark-route-rule"), "image_input");
  assert.equal(json.metadata.spark_route_rule, "image_input");
  assert.match(json.metadata.spark_route_reason, /carries an image: eyes can see/);
  assert.equal(eyes.bodies.length, before + 1);
  const messages = eyes.bodies.at(-1)!.messages as { role: string; content: unknown }[];
  assert.deepEqual(messages.at(-1), {
    role: "user",
    content: [
      { type: "text", text: "What is in this picture?" },
      { type: "image_url", image_url: { url: PNG, detail: "low" } },
    ],
  });
  // Text alone still goes to the text model.
  const plain = await post("/v1/responses", { model: "auto", input: "what is a closure?" });
  assert.equal(plain.json.model, "spark");
});

test("Responses: an http(s) image to a vision model over the responses wire arrives as input_image", async () => {
  const image = "https://example.com/cat.png";
  const { status, json } = await post("/v1/responses", { model: "eyes-responses", input: imageInput(image) });
  assert.equal(status, 200, JSON.stringify(json));
  assert.equal(json.output[0].content[0].text, "a pixel, seen over responses");
  const input = eyesResponses.bodies.at(-1)!.input as { role: string; content: unknown }[];
  assert.deepEqual(input.at(-1), {
    type: "message",
    role: "user",
    content: [
      { type: "input_text", text: "What is in this picture?" },
      { type: "input_image", image_url: image, detail: "low" },
    ],
  });
});

test("an explicit text-only model is refused with image_unsupported on both APIs, naming the models that can", async () => {
  const textRequests = text.bodies.length;
  const responses = await post("/v1/responses", { model: "spark", input: imageInput() });
  assert.equal(responses.status, 400);
  assert.equal(responses.json.error.code, "image_unsupported");
  assert.match(
    responses.json.error.message,
    /'spark' cannot see images.*Models that can: eyes, eyes-responses/,
  );

  const chat = await post("/v1/chat/completions", {
    model: "deep",
    messages: [
      {
        role: "user",
        content: [
          { type: "text", text: "what is this?" },
          { type: "image_url", image_url: { url: PNG } },
        ],
      },
    ],
  });
  assert.equal(chat.status, 400);
  assert.equal(chat.json.error.code, "image_unsupported");
  assert.match(chat.json.error.message, /Models that can: eyes/);
  assert.equal(text.bodies.length, textRequests, "the text-only upstream never saw the request");
});

test("Chat Completions: an image to auto is routed to the model that sees, and forwarded", async () => {
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model: "auto",
      messages: [
        {
          role: "user",
          content: [
            { type: "text", text: "describe" },
            { type: "image_url", image_url: { url: PNG } },
          ],
        },
      ],
    }),
  });
  const json = (await response.json()) as Json;
  assert.equal(response.status, 200, JSON.stringify(json));
  assert.equal(response.headers.get("x-spark-route-rule"), "image_input");
  assert.equal(json.choices[0].message.content, "I see a red pixel");
  const messages = eyes.bodies.at(-1)!.messages as { content: unknown }[];
  assert.deepEqual(messages.at(-1)!.content, [
    { type: "text", text: "describe" },
    { type: "image_url", image_url: { url: PNG } },
  ]);
});

test("WebSocket: an image to a text-only model is an error event; to auto it is routed", async () => {
  const client = await WsClient.connect(url);
  try {
    client.send({ type: "response.create", model: "spark", input: imageInput() });
    const error = await client.waitForType("error");
    assert.equal((error.error as { code: string }).code, "image_unsupported");
    const events = await client.turn({ model: "auto", input: imageInput() });
    const done = events.at(-1)! as {
      type: string;
      response: { model: string; metadata: Record<string, string> };
    };
    assert.equal(done.type, "response.completed");
    assert.equal(done.response.model, "eyes");
    assert.equal(done.response.metadata.spark_route_rule, "image_input");
  } finally {
    await client.close();
  }
});

test("a malformed image is a 400 naming it, never dropped", async () => {
  const bad = await post("/v1/responses", { model: "auto", input: imageInput("file:///etc/passwd") });
  assert.equal(bad.status, 400);
  assert.equal(bad.json.error.code, "invalid_image_url");
  assert.equal(bad.json.error.param, "input[0].content[1].image_url");
  const byFile = await post("/v1/responses", {
    model: "eyes",
    input: [{ role: "user", content: [{ type: "input_image", file_id: "file-1" }] }],
  });
  assert.equal(byFile.status, 400);
  assert.equal(byFile.json.error.code, "unsupported_value");
});

test("hosted tools are accepted but the response says they were not available, and the log has one line", async () => {
  const tools = [
    { type: "web_search" },
    { type: "file_search", vector_store_ids: ["vs_1"] },
    { type: "function", name: "read", parameters: { type: "object" } },
  ];
  const first = await post("/v1/responses", { model: "spark", input: "hello", tools });
  assert.equal(first.status, 200, JSON.stringify(first.json));
  assert.equal(first.json.metadata.spark_unavailable_tools, "web_search,file_search");
  const second = await post("/v1/responses", { model: "spark", input: "again", tools });
  assert.equal(second.json.metadata.spark_unavailable_tools, "web_search,file_search");
  const lines = logLines.filter((line) => line.includes("web_search"));
  assert.equal(lines.length, 1, logLines.join("\n"));
  assert.match(lines[0]!, /not available/);
  const none = await post("/v1/responses", { model: "spark", input: "plain" });
  assert.equal(none.json.metadata.spark_unavailable_tools, undefined);
});

test("a llama model cannot be declared to see, and the llama engine refuses images itself", async () => {
  const config = file(
    "images-llama.json",
    JSON.stringify({ models: { spark: { engine: "llama", model: "x.gguf", vision: true } } }),
  );
  await assert.rejects(
    createModels(resolveSettings({ config }, {}), () => {}),
    (error) => error instanceof ConfigError && /llama engine cannot see images/.test(error.message),
  );
});

const modelPath = testModelPath();
test(
  "the llama engine (tiny model) refuses an image with image_unsupported, engine and server",
  { skip: modelPath ? false : MODEL_SKIP_MESSAGE },
  async () => {
    const engine = new LlamaEngine({
      modelPath: async () => modelPath!,
      gpu: false,
      threads: 1,
      contextSize: 256,
      sequences: 1,
    });
    await engine.start();
    const llamaServer = new SparkServer({ engine, port: 0 });
    await llamaServer.listen();
    try {
      const request: EngineRequest = {
        model: "spark",
        items: [
          {
            type: "message",
            role: "user",
            text: "what is this?",
            parts: [
              { type: "text", text: "what is this?" },
              { type: "image", url: PNG },
            ],
          },
        ],
        tools: [],
        toolChoice: "auto",
        parallelToolCalls: true,
      };
      const refused = (error: unknown) => error instanceof SparkError && error.code === "image_unsupported";
      assert.throws(() => engine.validateRequest(request), refused);
      await assert.rejects(async () => {
        for await (const part of engine.stream(request, new AbortController().signal)) void part;
      }, refused);
      const response = await fetch(`${llamaServer.url}/v1/responses`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "auto", input: imageInput() }),
      });
      const json = (await response.json()) as { error: { code: string; message: string } };
      assert.equal(response.status, 400);
      assert.equal(json.error.code, "image_unsupported");
      assert.match(json.error.message, /no configured model can see/);
    } finally {
      await llamaServer.close();
    }
  },
);

test("GET /v1/models says which models see images (vision), auto when any does", async () => {
  const response = await fetch(`${url}/v1/models`);
  assert.equal(response.status, 200);
  const body = (await response.json()) as { data: { id: string; vision?: boolean }[] };
  const vision = Object.fromEntries(body.data.map((m) => [m.id, m.vision]));
  assert.equal(vision.spark, false);
  assert.equal(vision.deep, false);
  assert.equal(vision.eyes, true);
  assert.equal(vision["eyes-responses"], true);
  assert.equal(vision.auto, true);
  const one = (await (await fetch(`${url}/v1/models/eyes`)).json()) as { vision?: boolean };
  assert.equal(one.vision, true);
});

test("spark exec --image sends the picture as input_image: auto routes it to the model that sees", async () => {
  const workspace = freshDir("ws-");
  const image = join(workspace, "shot.png");
  writeFileSync(image, Buffer.from(PNG.slice(PNG.indexOf(",") + 1), "base64"));
  const before = eyes.bodies.length;
  const run = await runToExit([
    "exec",
    "--json",
    "-C",
    workspace,
    "--server",
    url,
    "--tier",
    "auto",
    "--image",
    image,
    "what is in this picture?",
  ]);
  assert.equal(run.code, 0, run.stderr + run.stdout);
  const events = jsonLines(run.stdout);
  const message = events.find((e) => e.type === "item.completed") as { item: { text?: string } } | undefined;
  assert.equal(message?.item.text, "I see a red pixel");
  assert.equal(eyes.bodies.length, before + 1);
  const messages = eyes.bodies.at(-1)!.messages as { role: string; content: unknown }[];
  const user = messages.findLast((m) => m.role === "user")!;
  assert.deepEqual(user.content, [
    { type: "text", text: "what is in this picture?" },
    { type: "image_url", image_url: { url: PNG } },
  ]);

  // A model that cannot see: the turn fails with the server's reason, nothing is answered unseen.
  const refused = await runToExit([
    "exec",
    "--json",
    "-C",
    workspace,
    "--server",
    url,
    "--tier",
    "spark",
    "--image",
    image,
    "what is this?",
  ]);
  assert.equal(refused.code, 1, refused.stderr);
  assert.match(refused.stdout, /image_unsupported|cannot see images/);

  const missing = await runToExit(["exec", "-C", workspace, "--server", url, "--image", "nope.png", "hi"]);
  assert.equal(missing.code, 2);
  assert.match(missing.stderr, /--image nope\.png: no such file/);
});

test(
  "the TUI: /image PATH and a pasted image path attach images, shown in the transcript and sent as input_image",
  { skip: tmuxMissing ?? false },
  async () => {
    const missing = distMissing();
    assert.equal(missing, undefined, missing);
    const tmux = new TmuxServer();
    try {
      const cwd = freshDir("ws-");
      writeFileSync(join(cwd, "shot.png"), Buffer.from(PNG.slice(PNG.indexOf(",") + 1), "base64"));
      const pasted = join(cwd, "pasted image.png");
      writeFileSync(pasted, Buffer.from(PNG.slice(PNG.indexOf(",") + 1), "base64"));
      const term = tmux.start({ args: ["--server", url, "--tier", "auto"], cwd, dataDir: freshDir("data-") });
      await term.waitFor(
        () => / │ ready( │|$)/.test(term.statusLine()) && term.lastLine().startsWith("›"),
        "ready",
      );
      term.type("/image shot.png");
      term.press("Enter");
      await term.waitFor(/\[image: shot\.png\] \d+ KiB attached to your next message/, "the attached line");
      const before = eyes.bodies.length;
      term.type("what is in this picture?");
      term.press("Enter");
      const screen = await term.waitFor("I see a red pixel", "the answer of the model that sees");
      assert.match(screen, /^› what is in this picture\?\n\s+\[image: shot\.png\]$/m);
      assert.equal(eyes.bodies.length, before + 1);
      const sent = eyes.bodies.at(-1)!.messages as { role: string; content: unknown }[];
      assert.deepEqual(sent.findLast((m) => m.role === "user")!.content, [
        { type: "text", text: "what is in this picture?" },
        { type: "image_url", image_url: { url: PNG } },
      ]);

      // A dropped file: the terminal pastes its quoted path (bracketed paste).
      await term.waitFor(() => / │ ready( │|$)/.test(term.statusLine()), "ready again");
      tmux.tmux("set-buffer", "-b", "img", `'${pasted}'`);
      tmux.tmux("paste-buffer", "-p", "-b", "img", "-t", term.name);
      await term.waitFor("[image: pasted image.png]", "the pasted image attached");
      assert.ok(!term.lastLine().includes("pasted image.png"), "the path is not typed into the prompt");
      term.type("and this one?");
      term.press("Enter");
      await term.waitFor((s) => s.split("I see a red pixel").length === 3, "the second answer");
      assert.equal(eyes.bodies.length, before + 2);
    } finally {
      tmux.kill();
    }
  },
);

test("the app: an attached and a pasted image are sent as input_image and shown as thumbnails in the transcript", async () => {
  const workspace = freshDir("ws-");
  const image = join(workspace, "shot.png");
  writeFileSync(image, Buffer.from(PNG.slice(PNG.indexOf(",") + 1), "base64"));
  const app = spawnCli(
    ["app", workspace, "--port", "0", "--sandbox", "off", "--server", url, "--tier", "auto"],
    { SPARK_DATA_DIR: freshDir("data-") },
    300_000,
  );
  try {
    const line = await firstLine(app);
    const appUrl = /^spark app on (http:\/\/127\.0\.0\.1:\d+\/)/.exec(line)?.[1];
    assert.ok(appUrl, `unexpected first line: ${line}\n${app.stderr()}`);
    const browser = await launchBrowser();
    const page = await browser.newPage({ viewport: { width: 1200, height: 800 } });
    page.setDefaultTimeout(0);
    await page.goto(appUrl);
    // The attach button's file picker; the new task's tier is spark, which cannot see: said, not hidden.
    await page.locator("input.image-picker").setInputFiles(image);
    await page.locator(".composer .thumbnail img").waitFor();
    await page.locator("textarea.input").fill("what is in this picture?");
    await page.locator("textarea.input").press("Enter");
    await page.getByText("The model 'spark' cannot see images").waitFor();
    const user = page.locator(".msg.user", { hasText: "what is in this picture?" });
    assert.equal(await user.locator(".thumbnail img").getAttribute("src"), PNG);
    assert.equal(await page.locator(".composer .thumbnail").count(), 0, "the composer is emptied");

    // Tier auto, and a pasted image (a screenshot on the clipboard): routed to the model that sees.
    await page.locator("header .model-select, .model-select").first().selectOption("auto");
    const before = eyes.bodies.length;
    await page.locator("textarea.input").evaluate(
      (textarea, data) => {
        const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
        const transfer = new DataTransfer();
        transfer.items.add(new File([bytes], "clip.png", { type: "image/png" }));
        textarea.dispatchEvent(
          new ClipboardEvent("paste", { clipboardData: transfer, bubbles: true, cancelable: true }),
        );
      },
      PNG.slice(PNG.indexOf(",") + 1),
    );
    await page.locator(".composer .thumbnail img").waitFor();
    await page.locator("textarea.input").fill("and now?");
    if (process.env.SPARK_APP_SCREENSHOTS)
      await page.screenshot({ path: join(process.env.SPARK_APP_SCREENSHOTS, "images.png") });
    await page.locator("textarea.input").press("Enter");
    await page.locator(".msg.assistant", { hasText: "I see a red pixel" }).waitFor();
    assert.equal(await page.locator(".msg.user .thumbnail img").count(), 2);
    assert.equal(eyes.bodies.length, before + 1);
    const sent = eyes.bodies.at(-1)!.messages as { role: string; content: unknown }[];
    assert.deepEqual(sent.findLast((m) => m.role === "user")!.content, [
      { type: "text", text: "and now?" },
      { type: "image_url", image_url: { url: PNG } },
    ]);
    await page.close();
  } finally {
    await stop(app).catch(() => {});
  }
});
