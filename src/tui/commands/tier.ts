/**
 * The commands that choose what answers: /tier (one of the server's tiers, as /v1/models lists
 * them; Ctrl-T toggles spark ⇄ deep) and /model (the GGUF file an in-process server loads: chosen
 * at start, or again after the model could not load).
 */
import { dim, yellow } from "../style.js";
import type { Command } from "./command.js";

export const tier: Command = {
  names: ["tier"],
  async run({ tui, args }) {
    // The server's tiers are read in the background; a /tier waits for them.
    await tui.runtime?.modelsKnown();
    const tiers = tui.tiers();
    const wanted = args[0];
    if (!wanted) {
      tui.screen.line(dim(`tier: ${tui.model} (of ${tiers.join(", ")}; Ctrl-T toggles spark ⇄ deep)`));
    } else if (!tiers.includes(wanted)) {
      // Refused at once, not at the next message: the names are the server's /v1/models.
      tui.screen.line(
        yellow(
          `unknown tier ${wanted}: ${tui.runtime?.models ? "this server serves" : "the tiers are"} ${tiers.join(", ")} (Tab completes)`,
        ),
      );
    } else tui.setModel(wanted);
  },
};

/**
 * `/model FILE.gguf`: the model file the in-process server loads. It can change while not
 * connected (the model could not load): the server starts again with that file. A tier name here
 * points at /tier.
 */
export const model: Command = {
  names: ["model"],
  run({ tui, args }) {
    const file = args.join(" ");
    const { flags } = tui;
    if (tui.tiers().includes(file)) {
      tui.screen.line(yellow(`${file} is a tier: /tier ${file} (/model takes a GGUF model file)`));
    } else if (file === "") {
      const chosen = flags.serve.model;
      tui.screen.line(
        dim(
          `model file: ${typeof chosen === "string" ? chosen : "the server's (set one with `spark --model FILE.gguf`)"}; the tier is ${tui.model} (/tier)`,
        ),
      );
    } else if (tui.phase !== "failed") {
      tui.screen.line(
        yellow(
          tui.agent
            ? `the model file is chosen at start: spark --model ${file} (/tier switches between the server's tiers)`
            : "wait for the server to start (or fail) first",
        ),
      );
    } else if (flags.server !== undefined || process.env.SPARK_SERVER) {
      tui.screen.line(yellow("the remote server chooses its model; /retry connects again"));
    } else if (flags.serve.engine !== undefined && flags.serve.engine !== "llama") {
      tui.screen.line(
        yellow(`the ${String(flags.serve.engine)} engine loads no model file; /retry tries again`),
      );
    } else {
      flags.serve.model = file;
      tui.screen.line(dim(`loading ${file}…`));
      void tui.connect();
      return "drawn";
    }
  },
};
