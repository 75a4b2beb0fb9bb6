#!/usr/bin/env bash
# Builds the data-science sandbox image and smoke-tests it end to end:
#   1. `sandboxd image build zylon-sandbox-templates/code-execution:1.1.0` (debootstrap
#      bookworm + Debian's Python data stack; skipped when the image is installed,
#      unless --rebuild),
#   2. `sandboxd serve` on loopback with that image (the configuration's default name),
#   3. a bash call whose Python script imports the contract's libraries Debian packages,
#      runs the tools, and draws a pandas + matplotlib chart into
#      /mnt/user-data/outputs/chart.png,
#   4. the Files API lists the PNG and serves it; its bytes are checked to be a PNG,
#   5. each built-in skill (skills/: xlsx, docx, pdf, pptx, data-analysis) through
#      /messages with container.skills, the scripted upstream model (tests/) calling
#      bash: the skill's helper scripts run from /mnt/skills/<name>/ in the image and
#      what they write is opened again with the same library and its content checked.
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
# The scripted model (tests/scripted_upstream.h) drives step 5.
upstream_bin=./build/tests/scripted_upstream
[ -x "$upstream_bin" ] || cmake --build build -j2 --target scripted_upstream
"$upstream_bin" > "$work/upstream.log" 2>&1 &
upstream=$!
upstream_port=""
for _ in $(seq 100); do
  upstream_port=$(sed -n 's/^listening on \([0-9]*\)$/\1/p' "$work/upstream.log")
  [ -n "$upstream_port" ] && break
  sleep 0.1
done
[ -n "$upstream_port" ] || { cat "$work/upstream.log"; echo "smoke: the scripted upstream did not start"; exit 1; }
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
model:
  baseUrl: "http://127.0.0.1:$upstream_port"
  models: { default: scripted }
  timeoutSec: 300
YAML
"$bin" serve --config "$work/config.yaml" > "$work/server.log" 2>&1 &
server=$!
trap 'kill $server $upstream 2>/dev/null; wait $server $upstream 2>/dev/null; rm -rf "$work"' EXIT
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

echo "== built-in skills: each one's helper scripts in the image, through /messages with container.skills"
python3 - "$base" "$token" "http://127.0.0.1:$upstream_port" <<'PY'
import json, sys, urllib.request

base, token, upstream = sys.argv[1:4]

def call(url, body=None, headers=None):
    request = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                     headers={"content-type": "application/json", **(headers or {})},
                                     method="POST" if body is not None else "GET")
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read() or b"null")

# One bash command per skill: make files with the skill's helpers, then open what they
# made with the same library and check its content; prints SKILL-OK <name>.
checks = {
    "xlsx": r"""cd /tmp && cat > spec.json <<'EOF'
{"sheets": [{"name": "Sales", "columns": ["Region", "Q1", "Q2", "Total"],
  "rows": [["North", 120, 135, "=B2+C2"], ["South", 98, 110, "=B3+C3"]], "number_format": {"B:D": "#,##0"}, "totals": true}]}
EOF
python3 /mnt/skills/xlsx/scripts/make_xlsx.py spec.json /mnt/user-data/outputs/smoke.xlsx
python3 /mnt/skills/xlsx/scripts/inspect_xlsx.py /mnt/user-data/outputs/smoke.xlsx
python3 - <<'EOF'
from openpyxl import load_workbook
ws = load_workbook("/mnt/user-data/outputs/smoke.xlsx")["Sales"]
assert [c.value for c in ws[1]] == ["Region", "Q1", "Q2", "Total"], [c.value for c in ws[1]]
assert ws["A2"].value == "North" and ws["B2"].value == 120 and ws["D2"].value == "=B2+C2"
assert ws["B4"].value == "=SUM(B2:B3)" and ws["A1"].font.bold and ws.freeze_panes == "A2"
print("SKILL-OK xlsx")
EOF""",
    "docx": r"""cd /tmp && cat > c.md <<'EOF'
# Smoke heading
A paragraph with **bold** words.

- first bullet
- second bullet

| name | value |
|---|---|
| alpha | 1 |
EOF
python3 /mnt/skills/docx/scripts/make_docx.py c.md /mnt/user-data/outputs/smoke.docx --title "Smoke"
python3 /mnt/skills/docx/scripts/read_docx.py /mnt/user-data/outputs/smoke.docx
python3 - <<'EOF'
from docx import Document
d = Document("/mnt/user-data/outputs/smoke.docx")
texts = [p.text for p in d.paragraphs]
assert "Smoke heading" in texts and "first bullet" in texts, texts
heading = next(p for p in d.paragraphs if p.text == "Smoke heading")
assert heading.style.name == "Heading 1", heading.style.name
assert any(r.bold and r.text == "bold" for p in d.paragraphs for r in p.runs)
assert d.tables[0].cell(1, 0).text == "alpha"
print("SKILL-OK docx")
EOF""",
    "pdf": r"""cd /tmp && printf '# Smoke heading\nA paragraph for the smoke test.\n\n- a bullet\n\n| k | v |\n|---|---|\n| x | 1 |\n---\n## Page two\nEnd.\n' > c.md
python3 /mnt/skills/pdf/scripts/make_pdf.py c.md /mnt/user-data/outputs/smoke.pdf --title "Smoke PDF"
python3 /mnt/skills/pdf/scripts/pdf_tools.py info /mnt/user-data/outputs/smoke.pdf
python3 /mnt/skills/pdf/scripts/pdf_tools.py merge /tmp/twice.pdf /mnt/user-data/outputs/smoke.pdf /mnt/user-data/outputs/smoke.pdf
python3 /mnt/skills/pdf/scripts/pdf_tools.py split /tmp/twice.pdf /tmp/parts
python3 - <<'EOF'
from pypdf import PdfReader
r = PdfReader("/mnt/user-data/outputs/smoke.pdf")
assert len(r.pages) == 2, len(r.pages)
text = r.pages[0].extract_text()
assert "Smoke heading" in text and "A paragraph for the smoke test." in text, text
assert "Page two" in r.pages[1].extract_text()
assert len(PdfReader("/tmp/twice.pdf").pages) == 4 and len(PdfReader("/tmp/parts/twice-3.pdf").pages) == 1
print("SKILL-OK pdf")
EOF""",
    "pptx": r"""cd /tmp && python3 -c '
import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot as plt
plt.bar(["a", "b"], [1, 2]); plt.savefig("/tmp/chart.png", dpi=80)'
cat > deck.json <<'EOF'
{"title": "Smoke deck", "subtitle": "built in the image",
 "slides": [{"title": "Points", "bullets": ["alpha", ["beta"]]}, {"title": "Chart", "image": "/tmp/chart.png", "bullets": ["gamma"]}]}
EOF
python3 /mnt/skills/pptx/scripts/make_pptx.py deck.json /mnt/user-data/outputs/smoke.pptx
python3 /mnt/skills/pptx/scripts/read_pptx.py /mnt/user-data/outputs/smoke.pptx > /tmp/read.txt && cat /tmp/read.txt
python3 - <<'EOF'
import zipfile, xml.etree.ElementTree as ET
z = zipfile.ZipFile("/mnt/user-data/outputs/smoke.pptx")
assert z.testzip() is None
for name in z.namelist():
    if name.endswith((".xml", ".rels")):
        ET.fromstring(z.read(name))
assert "ppt/media/image1.png" in z.namelist()
text = open("/tmp/read.txt").read()
assert text.startswith("3 slides") and "Points\nalpha\nbeta" in text and "[1 picture(s)]" in text, text
print("SKILL-OK pptx")
EOF""",
    "data-analysis": r"""cd /tmp && printf 'region,month,revenue\nNorth,Jan,10\nSouth,Jan,5\nNorth,Feb,12\nSouth,Feb,7\n' > sales.csv
python3 /mnt/skills/data-analysis/scripts/analyze.py sales.csv --out /mnt/user-data/outputs/analysis --group-by region --value revenue
python3 - <<'EOF'
import pandas as pd
report = open("/mnt/user-data/outputs/analysis/report.md").read()
assert "| North | 22 | 11 | 2 |" in report, report
assert open("/mnt/user-data/outputs/analysis/chart.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"
summary = pd.read_csv("/mnt/user-data/outputs/analysis/summary.csv", index_col=0)
assert summary.loc["mean", "revenue"] == 8.5, summary
print("SKILL-OK data-analysis")
EOF""",
}
failed = []
for name, command in checks.items():
    call(upstream + "/_script", [
        {"message": {"content": [{"type": "tool_use", "id": "toolu_smoke", "name": "bash_code_execution",
                                  "input": {"command": command, "timeout": 300}}],
                     "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 1}}},
        {"message": {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn",
                     "usage": {"input_tokens": 1, "output_tokens": 1}}}])
    reply = call(base + "/api/gpt/v1/messages", {
        "model": "default", "max_tokens": 100,
        "container": {"id": "smoke-skills", "skills": [{"type": "anthropic", "skill_id": name}]},
        "tools": [{"name": "code_execution", "type": "code_execution_20250825"}],
        "messages": [{"role": "user", "content": f"use the {name} skill"}]},
        {"authorization": "Bearer " + token})
    result = reply["content"][1]["content"]
    ok = result.get("return_code") == 0 and f"SKILL-OK {name}" in result.get("stdout", "")
    ok = ok and reply["container"]["skills"][0]["skill_id"] == name
    print(f"-- {name}: {'ok' if ok else 'FAILED'}")
    if not ok:
        print(result.get("stdout", "")[-3000:], result.get("stderr", "")[-3000:])
        failed.append(name)
listing = call(base + "/api/gpt/v1/files?scope_id=smoke-skills&limit=100", headers={"authorization": "Bearer " + token})
names = sorted(f["filename"] for f in listing["data"])
print("outputs:", ", ".join(names))
for expected in ("smoke.xlsx", "smoke.docx", "smoke.pdf", "smoke.pptx", "report.md", "chart.png"):
    if expected not in names:
        failed.append("files API: " + expected)
if failed:
    sys.exit("smoke: FAILED skills: " + ", ".join(failed))
print("smoke: OK, every built-in skill's helpers ran in the image and their files check out")
PY
