#!/usr/bin/env bash
# install-agents.sh: install the pinned coding agents that ctxd's real-agent
# tests run (internal/agenttest) from the npm registry into a cache outside the
# repository, one directory per package and version:
#
#   ${CTXD_AGENTS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ctxd/agents}/<package>@<version>/
#
# Idempotent: a version already installed (marked by a .installed file written
# last) is not touched again, so a second run does no network and is instant.
# Prints one line per agent: "<bin-name> <absolute path of its executable>".
# Needs npm (and node for pi). Exit status 1 when npm is missing or an install
# fails; nothing half-installed is left under the cache (installs go to a
# temporary directory beside it and are renamed into place).
set -euo pipefail

# The pins: package, version, executable name. Change a version here and in
# internal/agenttest (Agent pins), together.
AGENTS=(
  "@anthropic-ai/claude-code 2.1.197 claude"
  "@mariozechner/pi-coding-agent 0.73.1 pi"
  "@openai/codex 0.171.0 codex"
)

root=${CTXD_AGENTS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ctxd/agents}
mkdir -p "$root"
root=$(cd "$root" && pwd)

# Two runs at once (parallel worktrees) install one after the other.
if command -v flock >/dev/null; then
  exec 9>"$root/.lock"
  flock 9
fi

for entry in "${AGENTS[@]}"; do
  read -r pkg version bin <<<"$entry"
  dest="$root/$pkg@$version"
  exe="$dest/node_modules/.bin/$bin"
  if [ -f "$dest/.installed" ] && [ -x "$exe" ]; then
    echo "$bin $exe"
    continue
  fi
  if ! command -v npm >/dev/null; then
    echo "install-agents: npm not found; cannot install $pkg@$version" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$dest")"
  tmp=$(mktemp -d "$dest.tmp.XXXXXX")
  # A package.json of its own so npm installs here and not in a parent project.
  echo '{"name":"ctxd-agent-cache","private":true}' >"$tmp/package.json"
  echo "install-agents: installing $pkg@$version into $dest" >&2
  if ! npm install --prefix "$tmp" --no-audit --no-fund --no-save --loglevel=error \
      "$pkg@$version" >&2; then
    rm -rf "$tmp"
    echo "install-agents: npm install $pkg@$version failed" >&2
    exit 1
  fi
  if [ ! -x "$tmp/node_modules/.bin/$bin" ]; then
    rm -rf "$tmp"
    echo "install-agents: $pkg@$version installed no executable $bin" >&2
    exit 1
  fi
  touch "$tmp/.installed"
  rm -rf "$dest"
  mv "$tmp" "$dest"
  echo "$bin $exe"
done
