#!/usr/bin/env bash
# Installs what the VS Code end-to-end test needs, once, into a cache outside the repository
# (SPARK_VSCODE_E2E_CACHE, default ~/.cache/spark-vscode-e2e): Debian's chromium, ripgrep and the
# compilers code-server's native modules need; code-server 4.100.3 from npm (the newest whose
# engines accept Node 20); playwright-core. Follows ../shared/recipes/vscode-e2e (every workaround
# there was hit on this kind of machine).
set -euo pipefail
CACHE=${SPARK_VSCODE_E2E_CACHE:-$HOME/.cache/spark-vscode-e2e}
CODE_SERVER_VERSION=4.100.3
mkdir -p "$CACHE"
T=$(date +%s); ts(){ echo "== vscode e2e setup $(( $(date +%s) - T ))s: $*"; }

missing=()
for tool in chromium:chromium rg:ripgrep g++:build-essential make:build-essential python3:python3; do
  command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
done
[ -e /usr/include/krb5.h ] || [ -e /usr/include/krb5/krb5.h ] || missing+=(libkrb5-dev)
if [ ${#missing[@]} -gt 0 ]; then
  ts "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x "$CACHE/cs/node_modules/.bin/code-server" ]; then
  ts "seed @vscode/ripgrep's download cache with Debian's rg (its postinstall would fetch from GitHub)"
  export TMPDIR="$CACHE/tmp"
  mkdir -p "$TMPDIR/vscode-ripgrep-cache-1.15.11" "$CACHE/rgstage"
  cp "$(command -v rg)" "$CACHE/rgstage/rg"
  tar czf "$TMPDIR/vscode-ripgrep-cache-1.15.11/ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz" \
    -C "$CACHE/rgstage" rg
  ts "npm install code-server@$CODE_SERVER_VERSION (native modules build with node-gyp; a few minutes)"
  # node-gyp needs the Node headers: the folder holding include/node (/usr for Debian's nodejs).
  NODEDIR=${NODEDIR:-$(dirname "$(dirname "$(command -v node)")")}
  rm -rf "$CACHE/cs" && mkdir -p "$CACHE/cs"
  (cd "$CACHE/cs" && echo '{"private":true}' > package.json &&
    npm_config_nodedir="$NODEDIR" npm_config_unsafe_perm=true npm_config_yes=true \
    npm install --no-audit --no-fund "code-server@$CODE_SERVER_VERSION" >"$CACHE/npm-code-server.log" 2>&1) ||
    { tail -40 "$CACHE/npm-code-server.log"; exit 1; }
fi
ts "ready: $CACHE"
