#!/usr/bin/env bash
# The Workspace page's third-party libraries (marked, DOMPurify, highlight.js): installed
# by `npm ci` exactly as web/package-lock.json pins them (npm checks every package
# against the lockfile's integrity hash), and their browser builds copied into
# web/assets/vendor/, where the page loads them from its own origin (no external
# request: the page works air-gapped). The copies are not in git, so what the page
# serves cannot drift from the lockfile; this script runs on every build.
# Offline build hosts: `npm ci` takes `--offline` with a populated npm cache
# (NPM_CONFIG_OFFLINE=true).
set -euo pipefail
cd "$(dirname "$0")/../web"
npm ci --no-audit --no-fund --loglevel=error >/dev/null
vendor=assets/vendor
rm -rf "$vendor.new"
mkdir -p "$vendor.new"
modules=node_modules
copy() { install -m 0644 "$modules/$1" "$vendor.new/$2"; }
copy marked/lib/marked.esm.js marked.esm.js
copy marked/LICENSE marked-LICENSE.txt
copy dompurify/dist/purify.es.mjs purify.es.mjs
copy dompurify/LICENSE dompurify-LICENSE.txt
copy @highlightjs/cdn-assets/es/highlight.min.js highlight.min.js
copy @highlightjs/cdn-assets/styles/github.min.css highlight-github.css
copy @highlightjs/cdn-assets/LICENSE highlight-LICENSE.txt
rm -rf "$vendor"
mv "$vendor.new" "$vendor"
