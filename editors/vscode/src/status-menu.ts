/**
 * The status bar item's menu (a QuickPick): the tier, completions on/off, a 5-minute snooze, the
 * agent pane (when the pane's command is registered) and the log.
 */
import * as vscode from "vscode";
import { SNOOZE_MS, type Completions } from "./completions.js";

export interface MenuHost {
  tier(): "spark" | "deep";
  toggleTier(): Promise<void>;
  completions: Completions;
  showLog(): void;
}

/** The agent pane's command (src/pane*.ts registers it; the older name too). */
const OPEN_PANE = ["spark.pane.open", "spark.vscode.openPane"];

interface Entry extends vscode.QuickPickItem {
  run(): unknown;
}

export async function showStatusMenu(host: MenuHost): Promise<void> {
  const { completions } = host;
  const tier = host.tier();
  const snoozed = completions.snoozedUntil;
  const entries: Entry[] = [
    {
      label: tier === "spark" ? "$(zap) Tier: ⚡ spark" : "$(beaker) Tier: deep",
      description: `switch to ${tier === "spark" ? "deep" : "⚡ spark"}`,
      run: () => host.toggleTier(),
    },
    {
      label: completions.enabled ? "$(check) Completions: on" : "$(circle-slash) Completions: off",
      description: completions.enabled ? "turn off everywhere" : "turn on",
      run: () => completions.setEnabled(!completions.enabled),
    },
    snoozed === undefined
      ? {
          label: "$(clock) Snooze completions for 5 minutes",
          run: () => completions.snooze(SNOOZE_MS),
        }
      : {
          label: "$(clock) Resume completions",
          description: `snoozed until ${new Date(snoozed).toLocaleTimeString()}`,
          run: () => completions.snooze(0),
        },
  ];
  const commands = await vscode.commands.getCommands(true);
  const openPane = OPEN_PANE.find((command) => commands.includes(command));
  if (openPane) {
    entries.push({
      label: "$(comment-discussion) Open the Spark pane",
      run: () => vscode.commands.executeCommand(openPane),
    });
  }
  entries.push(
    { label: "$(output) Show the log", run: () => host.showLog() },
    {
      label: "$(gear) Settings",
      run: () => vscode.commands.executeCommand("workbench.action.openSettings", "spark."),
    },
  );
  const picked = await vscode.window.showQuickPick(entries, { title: "Spark", placeHolder: "Spark" });
  await picked?.run();
}
