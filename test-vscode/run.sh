#!/usr/bin/env bash
# `npm run test:vscode`: installs what it needs (setup.sh), packages the extension as a .vsix and
# runs the end-to-end test in a real VS Code (e2e.ts). Screenshots go to test-vscode/screenshots.
set -euo pipefail
cd "$(dirname "$0")/.."
bash test-vscode/setup.sh
test -f dist/cli/main.js || npm run build
echo "== package the extension"
(cd editors/vscode && { [ -d node_modules ] || npm ci --no-audit --no-fund; } && npm run typecheck && npm run package)
echo "== end to end"
node --import tsx test-vscode/e2e.ts
