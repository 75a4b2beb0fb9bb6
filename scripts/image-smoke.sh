#!/usr/bin/env bash
# Builds the data-science sandbox image and smoke-tests it end to end:
#   1. `sandboxd image build zylon-sandbox-templates/code-execution:1.1.0` (debootstrap
#      bookworm + Debian's Python data stack; skipped when the image is installed,
#      unless --rebuild),
#   2. `sandboxd serve` on loopback with that image (the configuration's default name),
#   3. a bash call whose Python script imports the seed's libraries Debian packages,
#      runs the tools, and draws a pandas + matplotlib chart into
#      /mnt/user-data/outputs/chart.png,
#   4. the Files API lists the PNG and serves it; its bytes are checked to be a PNG.
# Usage: bash scripts/image-smoke.sh [--rebuild] [DATA_DIR]   (default ./sandboxd-data)
# Needs root (as sandboxd does), debootstrap, and the Debian archive (a few hundred MB).
set -euo pipefail
cd "$(dirname "$0")/.."
rebuild=0
if [ "${1:-}" = "--rebuild" ]; then rebuild=1; shift; fi
data_dir=$(realpath -m "${1:-./sandboxd-data}")
image=zylon-sandbox-templates/code-execution:1.1.0
bin=./build/sandboxd
[ -x "$bin" ] || bash scripts/build.sh

if [ "$rebuild" = 1 ] || ! "$bin" image ls --data-dir "$data_dir" | grep -q '^zylon-sandbox-templates/code-execution  *1\.1\.0 '; then
  echo "== building $image (this downloads and installs a few hundred packages)"
  time "$bin" image build "$image" --data-dir "$data_dir"
fi
"$bin" image ls --data-dir "$data_dir"

work=$(mktemp -d /tmp/sandboxd-smoke-XXXXXX)
token=smoke-$RANDOM$RANDOM
cat > "$work/config.yaml" <<YAML
server:
  listen: "127.0.0.1:0"
  dataDir: "$data_dir"
auth:
  tokens:
    - { token: $token, owner: smoke }
external:
  opensandbox:
    codeExecution:
      image:
        repository: zylon-sandbox-templates/code-execution
        tag: "1.1.0"
YAML
"$bin" serve --config "$work/config.yaml" > "$work/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$work"' EXIT
port=""
for _ in $(seq 100); do
  port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/server.log")
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { cat "$work/server.log"; echo "smoke: the server did not start"; exit 1; }
base=http://127.0.0.1:$port
grep "sandbox image:" "$work/server.log"
echo "== /ready: $(curl -sS "$base/ready")"

script=$(cat <<'PY'
import importlib, subprocess
mods = ["pandas", "numpy", "scipy", "sklearn", "statsmodels", "matplotlib", "seaborn", "openpyxl", "xlsxwriter",
        "xlrd", "PIL", "docx", "pypdf", "reportlab", "img2pdf", "sympy", "mpmath", "tqdm", "dateutil", "pytz",
        "joblib", "pdfkit"]
for m in mods:
    mod = importlib.import_module(m)
    print(f"{m} {getattr(mod, '__version__', 'ok')}")
for tool in (["unzip", "-v"], ["7z", "i"], ["bc", "--version"], ["rg", "--version"], ["fdfind", "--version"],
             ["sqlite3", "--version"], ["curl", "--version"], ["unrar-free", "--version"]):
    out = subprocess.run(tool, capture_output=True, text=True)
    print(tool[0], "ok" if out.returncode in (0, 1) and (out.stdout or out.stderr) else "MISSING")
import pandas as pd, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
df = pd.DataFrame({"month": ["Jan", "Feb", "Mar", "Apr"], "revenue": [120, 135, 160, 152]})
ax = df.plot(x="month", y="revenue", kind="bar", legend=False, title="Revenue by month")
ax.set_ylabel("k$")
plt.tight_layout()
plt.savefig("/mnt/user-data/outputs/chart.png", dpi=100)
print("chart written")
PY
)
body=$(python3 -c 'import json,sys; print(json.dumps({"command": "python3 - <<\"EOF\"\n" + sys.argv[1] + "\nEOF", "timeout": 120}))' "$script")
echo "== bash_code_execution in a sandbox on the image"
result=$(curl -sS -X POST -H "Authorization: Bearer $token" "$base/api/gpt/v1/containers/smoke/tools/bash_code_execution" -d "$body")
python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(r.get("stdout","")); print(r.get("stderr","")[-2000:]); sys.exit(r.get("return_code", 1))' "$result"

echo "== Files API"
listing=$(curl -sS -H "Authorization: Bearer $token" "$base/api/gpt/v1/files?scope_id=smoke")
file_id=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1])["data"]; print(next(f["id"] for f in d if f["filename"] == "chart.png"))' "$listing")
curl -sS -H "Authorization: Bearer $token" -o "$work/chart.png" "$base/api/gpt/v1/files/$file_id/content?scope_id=smoke"
if [ "$(head -c 8 "$work/chart.png" | od -An -tx1 | tr -d ' \n')" != "89504e470d0a1a0a" ]; then
  echo "smoke: FAILED, the downloaded chart is not a PNG"; exit 1
fi
cp "$work/chart.png" "${SMOKE_PNG:-/tmp/sandboxd-smoke-chart.png}"
echo "smoke: OK, chart.png ($(stat -c %s "$work/chart.png") bytes, id $file_id) served by the Files API; a copy is at ${SMOKE_PNG:-/tmp/sandboxd-smoke-chart.png}"
