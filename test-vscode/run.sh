#!/usr/bin/env bash
# `npm run test:vscode`: installs what it needs (setup.sh), packages the extension as a .vsix and
# runs the end-to-end tests in a real VS Code (e2e.ts: completions and quick edit; pane-e2e.ts: the
# agent pane, with the pane-open figure). Screenshots go to test-vscode/screenshots.
set -euo pipefail
cd "$(dirname "$0")/.."
bash test-vscode/setup.sh
# Built again when a source is newer than the build (the pane runs `spark app` from dist/ and web/dist/).
if [ ! -f dist/cli/main.js ] || [ -n "$(find src web/src -newer dist/cli/main.js -print -quit)" ]; then npm run build; fi
echo "== package the extension"
(cd editors/vscode && { [ -d node_modules ] || npm ci --no-audit --no-fund; } && npm run typecheck && npm run package)
echo "== end to end"
node --import tsx test-vscode/e2e.ts
echo "== the Spark pane, end to end"
node --import tsx test-vscode/pane-e2e.ts
