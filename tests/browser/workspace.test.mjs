// The Workspace web page in a real browser (docs/workspace.md): Debian's chromium, headless,
// driven by playwright-core, against a real `sandboxd serve` whose model is the scripted
// upstream (tests/scripted_upstream.h). A person signs in, makes a thread, uploads a
// CSV, asks for a chart, watches the answer stream in with its execution step, sees the
// chart as an image artifact and downloads it. Screenshots of every step are saved in
// SCREENSHOT_DIR (build/screenshots/). Run by CTest with SANDBOXD_PATH and
// SCRIPTED_UPSTREAM_PATH.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { Stack, message as scriptedMessage, startServer, stopProgram, text, toolUse } from '../harness.mjs';

const TOKEN = 'browser-secret-token';
const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
const SHOTS = process.env.SCREENSHOT_DIR || join(tmpdir(), 'sandboxd-screenshots');
const stack = new Stack(TOKEN, 'person', 'sandboxd-browser-');
const script = (steps) => stack.script(steps);
const upstreamRequests = () => stack.upstreamRequests();
let browser;

// The model's chart: python3 writes a PNG with zlib and struct (no imaging library on
// the host image), after counting the rows of the uploaded CSV.
const CHART_COMMAND = `wc -l < /mnt/user-data/uploads/data.csv
python3 - <<'EOF'
import struct, zlib
w, h = 160, 90
rows = [b'\\x00' + b''.join(bytes([40 + x, 90 + (y % 60), 200 - x // 2]) for x in range(w)) for y in range(h)]
def chunk(t, d): return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d))
png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0))
png += chunk(b'IDAT', zlib.compress(b''.join(rows))) + chunk(b'IEND', b'')
open('/mnt/user-data/outputs/chart.png', 'wb').write(png)
EOF
sort -r /mnt/user-data/uploads/data.csv > /mnt/user-data/outputs/summary.csv`;

// Streamed by the scripted upstream in chunks of 5 characters.
const message = (content, stop_reason) => scriptedMessage(content, stop_reason, { chunk: 5 });

before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  await stack.start();
  // Root runs chromium without its own sandbox (it refuses to start as root otherwise).
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-dev-shm-usage'] });
});

after(async () => {
  if (browser) await browser.close();
  await stack.stop();
});

test('sign in, upload a CSV, ask for a chart, see it streamed and download it', async () => {
  const context = await browser.newContext({ viewport: { width: 1200, height: 860 }, acceptDownloads: true });
  const page = await context.newPage();
  const consoleErrors = [];
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => consoleErrors.push(String(e)));
  const shot = (name) => page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });

  await page.goto(stack.serverUrl + '/');
  await page.locator('#token').waitFor();
  await shot('01-sign-in');

  // A wrong token is refused with a message.
  await page.fill('#token', 'not-the-token');
  await page.press('#token', 'Enter');
  await page.locator('#signin-error').filter({ hasText: 'not accepted' }).waitFor();

  await page.fill('#token', TOKEN);
  await page.click('#signin-button');
  await page.locator('#app').waitFor();
  assert.equal(await page.evaluate(() => sessionStorage.getItem('sandboxd.token')), TOKEN);
  await shot('02-signed-in');

  await page.click('#new-thread');
  const item = page.locator('.thread-item.active');
  await item.waitFor();
  const threadId = await item.getAttribute('data-thread-id');
  assert.match(threadId, /^thread_/);
  await shot('03-new-thread');

  const csv = 'month,revenue\njan,10\nfeb,14\nmar,9\n';
  await page.setInputFiles('#file-input', { name: 'data.csv', mimeType: 'text/csv', buffer: Buffer.from(csv) });
  await page.locator('.upload.done[data-filename="data.csv"]').waitFor();
  assert.equal(await page.locator('.upload.done progress').evaluate((p) => p.value), 1);
  await shot('04-uploaded');

  await script([
    message([{ type: 'text', text: 'I will count the rows and draw the chart.' },
      { type: 'tool_use', id: 'toolu_chart', name: 'bash_code_execution', input: { command: CHART_COMMAND } }], 'tool_use'),
    message([{ type: 'text', text: 'Here is the **revenue** chart from `data.csv`:\n\n```python\nplot(revenue)\n```\nIt has 3 months.' }], 'end_turn'),
  ]);
  await page.fill('#prompt', 'Please chart data.csv');
  await page.press('#prompt', 'Enter');
  // The user's message is shown at once, the answer as it streams in.
  await page.locator('article.message.user', { hasText: 'Please chart data.csv' }).waitFor();
  const answer = page.locator('article.message.assistant[data-complete="true"]');
  await answer.waitFor({ timeout: 60000 });
  await answer.locator('text=It has 3 months.').waitFor();
  await answer.locator('pre.code code', { hasText: 'plot(revenue)' }).waitFor();
  assert.equal(await answer.locator('.text strong').first().innerText(), 'revenue', 'markdown bold');
  const image = answer.locator('img[data-testid="artifact-image"]');
  await image.waitFor();
  await page.waitForFunction(() => {
    const img = document.querySelector('img[data-testid="artifact-image"]');
    return img && img.complete && img.naturalWidth === 160;
  });
  // The CSV artifact is previewed as a table.
  const table = answer.locator('[data-testid="artifact"][data-filename="summary.csv"] table.csv');
  await table.waitFor();
  assert.deepEqual(await table.locator('th').allInnerTexts(), ['month', 'revenue']);
  assert.equal(await table.locator('tr').count(), 4);
  await shot('05-answer-with-chart');

  // The execution step: collapsed, with its command and output once opened.
  const step = answer.locator('details[data-testid="execution-step"]');
  assert.equal(await step.count(), 1);
  assert.equal(await step.evaluate((d) => d.open), false, 'collapsed at first');
  await step.locator('summary').click();
  assert.match(await step.locator('pre.command').innerText(), /^\$ wc -l < \/mnt\/user-data\/uploads\/data.csv/);
  assert.match(await step.locator('pre.stdout').innerText(), /^4$/m, 'the CSV was in the sandbox');
  assert.match(await step.locator('.rc').innerText(), /exit code 0/);
  await shot('06-execution-step-open');

  // The model was offered code execution and the thread is the container.
  const requests = await upstreamRequests();
  assert.equal(requests.length, 2);
  assert.deepEqual(requests[0].tools.map((t) => t.name), ['bash_code_execution', 'text_editor_code_execution']);

  // Download through the page and compare with the file in the container.
  const [download] = await Promise.all([
    page.waitForEvent('download'),
    answer.locator('[data-filename="chart.png"] button[data-testid="download"]').click(),
  ]);
  assert.equal(download.suggestedFilename(), 'chart.png');
  const saved = join(stack.dir, 'downloaded.png');
  await download.saveAs(saved);
  const fileId = Buffer.from('/mnt/user-data/outputs/chart.png').toString('base64url');
  const res = await fetch(`${stack.serverUrl}/api/gpt/v1/files/${fileId}/content?scope_id=${threadId}`,
    { headers: { Authorization: `Bearer ${TOKEN}` } });
  assert.equal(res.status, 200);
  const expected = Buffer.from(await res.arrayBuffer());
  assert.ok(expected.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])));
  assert.ok(readFileSync(saved).equals(expected), 'the downloaded bytes are the file the sandbox wrote');

  // After a reload the conversation comes back from the server, artifact included: the
  // URL names the thread, so it opens by itself.
  assert.equal(new URL(page.url()).hash, `#/thread/${threadId}`);
  await page.reload();
  await page.locator('#app').waitFor();
  await page.locator('article.message.assistant img[data-testid="artifact-image"]').waitFor();
  assert.equal(await page.locator('#thread-title').innerText(), 'Please chart data.csv');
  await page.locator('#file-count', { hasText: '3' }).waitFor();  // the upload and the two outputs

  // A model that is overloaded: the person is told, the message is not lost silently.
  await script([{ status: 529, error: { type: 'overloaded_error', message: 'Overloaded' } }]);
  await page.fill('#prompt', 'And another one');
  await page.press('#prompt', 'Enter');
  await page.locator('#banner', { hasText: 'Overloaded' }).waitFor();
  assert.equal(await page.locator('#prompt').inputValue(), 'And another one', 'the text stays to send again');
  await shot('07-error-shown');

  // A narrow window still reads.
  await page.click('#banner-close');
  await page.setViewportSize({ width: 400, height: 800 });
  await shot('08-narrow-window');
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `no horizontal scrolling on a narrow window (${overflow}px)`);

  assert.deepEqual(consoleErrors.filter((e) => !e.includes('Failed to load resource')), [], 'no script errors');
  await context.close();
});

test('keyboard only: sign in, new thread and send with Tab and Enter', async () => {
  const context = await browser.newContext({ viewport: { width: 1000, height: 700 } });
  const page = await context.newPage();
  await page.goto(stack.serverUrl + '/');
  await page.locator('#token').waitFor();
  assert.equal(await page.evaluate(() => document.activeElement.id), 'token', 'the token field has the focus');
  await page.keyboard.type(TOKEN);
  await page.keyboard.press('Enter');
  await page.locator('#app').waitFor();
  await page.locator('#new-thread').focus();
  await page.keyboard.press('Enter');
  await page.locator('.thread-item.active').waitFor();
  await page.waitForFunction(() => document.activeElement && document.activeElement.id === 'prompt');
  // The upstream pauses after the first block: the page shows it while the stream is open.
  await script([{ ...message([{ type: 'text', text: 'Hello from the keyboard test.' },
    { type: 'text', text: 'And the rest, later.' }], 'end_turn'), stall_after_block: 0, stall_ms: 3000 }]);
  await page.keyboard.type('Hi');
  await page.keyboard.press('Enter');
  await page.locator('article.message.assistant.streaming', { hasText: 'Hello from the keyboard test.' }).waitFor();
  assert.equal(await page.locator('article.message.assistant[data-complete="true"]').count(), 0,
    'the first part is shown before the answer is complete');
  await page.locator('article.message.assistant[data-complete="true"]', { hasText: 'And the rest, later.' }).waitFor();
  await page.screenshot({ path: join(SHOTS, '09-keyboard.png') });
  await context.close();
});

test('with features.codeExecution.enabled false the page says so and still chats', async () => {
  const server = await startServer(stack.dir, 'data-off',
                                   [...stack.configLines(), 'features: { codeExecution: { enabled: false } }']);
  try {
    const context = await browser.newContext({ viewport: { width: 1000, height: 700 } });
    const page = await context.newPage();
    await page.goto(server.url + '/');
    await page.fill('#token', TOKEN);
    await page.press('#token', 'Enter');
    await page.locator('#feature-note', { hasText: 'Code execution is turned off by the operator' }).waitFor();
    assert.equal(await page.locator('#code-toggle').isDisabled(), true);
    assert.equal(await page.locator('#code-toggle').isChecked(), false);
    await page.click('#new-thread');
    await script([message([{ type: 'text', text: 'Plain chat still answers.' }], 'end_turn')]);
    await page.fill('#prompt', 'Run some code please');
    await page.press('#prompt', 'Enter');
    await page.locator('article.message.assistant[data-complete="true"]', { hasText: 'Plain chat still answers.' }).waitFor();
    const requests = await upstreamRequests();
    assert.equal(requests.length, 1);
    assert.equal(requests[0].tools, undefined, 'no code execution offered');
    await page.screenshot({ path: join(SHOTS, '10-code-execution-off.png') });
    await context.close();
  } finally {
    await stopProgram(server.child);
  }
});

// A page that records what must never happen: a JavaScript dialog, or a request that
// leaves the server's origin (those are also refused, so nothing is ever fetched).
async function guardedPage(context, serverUrl) {
  const page = await context.newPage();
  const seen = { dialogs: [], external: [], errors: [] };
  page.on('dialog', (d) => { seen.dialogs.push(d.message()); d.dismiss().catch(() => {}); });
  const origin = new URL(serverUrl).origin;
  await context.route((url) => /^(https?|wss?|ftp):$/.test(url.protocol) && url.origin !== origin, (route) => {
    seen.external.push(route.request().url());
    return route.abort();
  });
  // The browser's own PDF viewer loads its parts from chrome:// (inside the browser, no
  // network); anything else must be the page's own files or its API.
  const internal = /^(blob:|data:|chrome:|chrome-extension:)/;
  page.on('request', (r) => {
    const url = r.url();
    if (internal.test(url)) return;
    if (!url.startsWith(origin)) seen.external.push(url);
    else if (!/^\/(assets\/|api\/|$)/.test(new URL(url).pathname)) seen.external.push(url);
  });
  page.on('console', (m) => { if (m.type() === 'error') seen.errors.push(`${m.text()} @ ${m.location().url}`); });
  page.on('pageerror', (e) => seen.errors.push(String(e)));
  return { page, seen };
}

async function signInAndOpenNewThread(page, serverUrl) {
  await page.goto(serverUrl + '/');
  await page.fill('#token', TOKEN);
  await page.press('#token', 'Enter');
  await page.locator('#app').waitFor();
  await page.click('#new-thread');
  const item = page.locator('.thread-item.active');
  await item.waitFor();
  return item.getAttribute('data-thread-id');
}

const HOSTILE_NAME = '<img src=x onerror=alert(4)>.txt';
const MARKDOWN_ANSWER = `# Quarterly results

| month | revenue |
|-------|--------:|
| jan   | 10      |
| feb   | 14      |

- first point
- second point, with \`inline code\`

See [the report format](https://example.com/report-format) for details.

\`\`\`python
def total(rows):
    return sum(r["revenue"] for r in rows)
\`\`\`

<script>alert(1)</script><img src=x onerror="alert(2)"><img src="http://127.0.0.1:9/evil.png">
![tracker](http://127.0.0.1:9/track.png)
[a javascript link](javascript:alert(3)) <iframe src="http://127.0.0.1:9/evil-frame"></iframe>
<style>body { display: none }</style><div class="drop-overlay" onclick="alert(5)">a fake overlay</div>
<svg onload="alert(6)"><circle r="5"/></svg>`;

// The model's files: an XLSX of two sheets (openpyxl), a one-page PDF (reportlab), a
// Python script, and a text file whose name is markup.
const FILES_COMMAND = `cd /mnt/user-data/outputs
python3 - <<'PY'
from openpyxl import Workbook
wb = Workbook()
ws = wb.active
ws.title = 'Revenue'
ws.append(['month', 'revenue', 'note'])
for i in range(1, 121):
    ws.append([f'm{i}', i * 10, 'ok' if i % 2 else 'even'])
notes = wb.create_sheet('Notes')
notes['A1'] = 'checked'
notes['B2'] = '<img src=x onerror=alert(7)>'
wb.save('report.xlsx')
from reportlab.pdfgen import canvas
c = canvas.Canvas('summary.pdf')
c.setFont('Helvetica', 24)
c.drawString(72, 720, 'Quarterly summary: revenue up 40%')
c.save()
open('total.py', 'w').write('def total(rows):\\n    return sum(r["revenue"] for r in rows)\\n')
open('<img src=x onerror=alert(4)>.txt', 'w').write('a file with a hostile name\\n')
PY
ls -l`;

test('markdown renders as elements; markup in text, files and names does nothing; XLSX and PDF previews', async () => {
  const context = await browser.newContext({ viewport: { width: 1200, height: 900 } });
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: stack.serverUrl });
  const { page, seen } = await guardedPage(context, stack.serverUrl);
  await signInAndOpenNewThread(page, stack.serverUrl);
  // An upload whose name is markup, too.
  await page.setInputFiles('#file-input', { name: '<svg onload=alert(8)>.csv', mimeType: 'text/csv', buffer: Buffer.from('a,b\n1,2\n') });
  await page.locator('.upload.done').waitFor();

  await script([
    message([text('Making the files.'), toolUse('toolu_files', 'bash_code_execution', { command: FILES_COMMAND })], 'tool_use'),
    message([text(MARKDOWN_ANSWER)], 'end_turn'),
  ]);
  await page.fill('#prompt', 'Summarise the quarter <img src=x onerror=alert(9)>');
  await page.press('#prompt', 'Enter');
  const answer = page.locator('article.message.assistant[data-complete="true"]');
  await answer.waitFor({ timeout: 60000 });
  const body = answer.locator('.text').last();

  // Markdown became the elements it names.
  await body.locator('h1', { hasText: 'Quarterly results' }).waitFor();
  assert.deepEqual(await body.locator('table th').allInnerTexts(), ['month', 'revenue']);
  assert.equal(await body.locator('table tbody tr').count(), 2);
  assert.deepEqual(await body.locator('ul > li').allInnerTexts(), ['first point', 'second point, with inline code']);
  const link = body.locator('a', { hasText: 'the report format' });
  assert.equal(await link.getAttribute('href'), 'https://example.com/report-format');
  assert.equal(await link.getAttribute('rel'), 'noopener noreferrer nofollow');
  assert.equal(await link.getAttribute('target'), '_blank');
  const code = body.locator('.code-block pre code');
  assert.equal(await code.count(), 1);
  assert.match(await code.innerText(), /def total\(rows\):\n {4}return sum/);
  assert.ok(await code.locator('span.hljs-keyword').count() > 0, 'the code is highlighted');
  await body.locator('.code-block button.copy').click();
  await body.locator('.code-block button.copy', { hasText: 'Copied' }).waitFor();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()),
    'def total(rows):\n    return sum(r["revenue"] for r in rows)');

  // The markup in the text is inert: no element that runs, loads or dresses up.
  const conversation = page.locator('#messages');
  for (const tag of ['script', 'img:not([data-testid="artifact-image"])', 'iframe:not([data-testid="pdf-preview"])', 'style',
    'svg', '.drop-overlay', '[onerror]', '[onclick]', '[onload]'])
    assert.equal(await conversation.locator(tag).count(), 0, `no ${tag} from the model's text`);
  assert.equal(await body.locator('a', { hasText: 'a javascript link' }).getAttribute('href'), null,
    'the javascript: link lost its href');
  await body.locator('.md-image', { hasText: '[image: tracker]' }).waitFor();
  assert.ok((await body.innerText()).includes('<script>alert(1)</script><img src=x onerror="alert(2)">'),
    "the model's HTML is shown as text");
  assert.ok((await page.locator('article.message.user').innerText()).includes('<img src=x onerror=alert(9)>'),
    "the user's markup is shown as typed");
  await body.scrollIntoViewIfNeeded();
  await page.screenshot({ path: join(SHOTS, '11-markdown-answer.png') });

  // The XLSX: a table per sheet, its size said.
  const xlsx = answer.locator('[data-testid="artifact"][data-filename="report.xlsx"] [data-testid="xlsx-preview"]');
  await xlsx.waitFor();
  const revenue = xlsx.locator('section[data-sheet="Revenue"]');
  assert.equal(await revenue.locator('.sheet-size').innerText(), '121 rows × 3 columns, the first 50 rows shown');
  assert.equal(await revenue.locator('tbody tr').count(), 50);
  assert.deepEqual(await revenue.locator('tbody tr').first().locator('td').allInnerTexts(), ['month', 'revenue', 'note']);
  assert.deepEqual(await revenue.locator('tbody tr').nth(1).locator('td').allInnerTexts(), ['m1', '10', 'ok']);
  const notes = xlsx.locator('section[data-sheet="Notes"]');
  assert.equal(await notes.locator('tbody tr').nth(1).locator('td').nth(1).innerText(), '<img src=x onerror=alert(7)>');
  await xlsx.scrollIntoViewIfNeeded();
  await page.screenshot({ path: join(SHOTS, '12-xlsx-preview.png') });

  // The PDF in the browser's own viewer, from a blob: URL typed application/pdf.
  const pdf = answer.locator('[data-testid="artifact"][data-filename="summary.pdf"] iframe[data-testid="pdf-preview"]');
  await pdf.waitFor();
  const src = await pdf.getAttribute('src');
  assert.match(src, /^blob:/);
  // The frame loaded that blob (a refused frame would show chrome-error://) as a PDF.
  let frame = null;
  for (let i = 0; i < 100 && !frame; i++) {
    frame = page.frames().find((f) => f.url() === src) || null;
    if (!frame) await page.waitForTimeout(100);
  }
  assert.ok(frame, `the PDF frame loaded its blob: ${JSON.stringify(page.frames().map((f) => f.url()))}`);
  assert.equal(await frame.evaluate(() => document.contentType), 'application/pdf');
  assert.equal(await page.evaluate(() => navigator.pdfViewerEnabled), true);
  await pdf.scrollIntoViewIfNeeded();
  for (const f of [frame, ...frame.childFrames()]) await f.waitForLoadState('load');  // the viewer, for the screenshot
  await page.screenshot({ path: join(SHOTS, '13-pdf-preview.png') });

  // Code highlighted; the file with a markup name is only its name.
  await answer.locator('[data-filename="total.py"] .code-block code span.hljs-keyword').first().waitFor();
  const hostile = answer.locator(`[data-testid="artifact"][data-filename="${HOSTILE_NAME}"]`);
  await hostile.locator('strong', { hasText: HOSTILE_NAME }).waitFor();
  await hostile.locator('pre.text-preview', { hasText: 'a file with a hostile name' }).waitFor();

  // The files panel: the upload and the outputs, with sizes; previews on demand.
  await page.locator('#files-details summary').click();
  const panel = page.locator('#file-list');
  await panel.locator('li[data-kind="upload"] [data-filename="<svg onload=alert(8)>.csv"]').waitFor();
  await page.locator('#file-count', { hasText: '5' }).waitFor();
  assert.equal(await panel.locator('li[data-kind="output"]').count(), 4);
  // Uploaded files are not downloadable by default (workspace.downloads.uploadedResources).
  await panel.locator('li[data-kind="upload"] .note', { hasText: 'turned off by your organisation' }).waitFor();
  assert.equal(await panel.locator('li[data-kind="upload"] button').count(), 0);
  const row = panel.locator('li[data-kind="output"] [data-filename="report.xlsx"]');
  assert.match(await row.locator('.meta').innerText(), /KiB/);
  await row.locator('button[data-testid="preview"]').click();
  await row.locator('section[data-sheet="Revenue"] .sheet-size').waitFor();
  await page.locator('#files-panel').scrollIntoViewIfNeeded();
  await page.screenshot({ path: join(SHOTS, '14-files-panel.png') });

  for (const tag of ['script:not([src])', 'iframe:not([data-testid="pdf-preview"])', 'svg', '[onerror]', '[onload]'])
    assert.equal(await page.locator(tag).count(), 0, `no ${tag} anywhere on the page`);
  assert.deepEqual(seen.dialogs, [], 'no dialog opened');
  assert.deepEqual(seen.external, [], 'no request left the page');
  assert.deepEqual(seen.errors.filter((e) => !e.includes('Failed to load resource')), [], 'no script errors');
  await context.close();
});

// Processes whose command line is `sleep 37` (the brackets keep the checking command out).
const COUNT_SLEEPERS = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c 'sleep 3[7]'";
const LONG_COMMAND = 'for i in 1 2 3; do echo tick $i; sleep 0.2; done; echo oops >&2; sleep 37; ' +
  'echo late > /mnt/user-data/outputs/too-late.txt';

test('a turn is stopped mid-command; threads are renamed, searched, deleted; the URL names the thread', async () => {
  const context = await browser.newContext({ viewport: { width: 1100, height: 860 } });
  const { page, seen } = await guardedPage(context, stack.serverUrl);
  const threadId = await signInAndOpenNewThread(page, stack.serverUrl);
  assert.equal(new URL(page.url()).hash, `#/thread/${threadId}`);

  await script([message([text('Starting the long job.'),
    toolUse('toolu_long', 'bash_code_execution', { command: LONG_COMMAND })], 'tool_use')]);
  await page.fill('#prompt', 'Run the long job');
  await page.press('#prompt', 'Enter');
  // The command's output shows while it runs.
  const step = page.locator('article.message.assistant details[data-testid="execution-step"]');
  await step.waitFor();
  await step.locator('summary').click();
  await step.locator('[data-testid="live-output"]', { hasText: 'tick 3' }).waitFor();
  await step.locator('[data-testid="live-output"] .stderr', { hasText: 'oops' }).waitFor();
  assert.equal(await page.locator('#stop').isVisible(), true);
  await page.screenshot({ path: join(SHOTS, '15-command-running.png') });

  await page.click('#stop');
  const stopped = page.locator('article.message.assistant.stopped[data-complete="true"]');
  await stopped.waitFor({ timeout: 30000 });
  await stopped.locator('.stopped-note').waitFor();
  assert.equal(await page.locator('#send').isVisible(), true);
  assert.equal(await page.locator('#prompt').isDisabled(), false);
  await page.screenshot({ path: join(SHOTS, '16-turn-stopped.png') });

  // A later command: the stopped one is gone from the sandbox, its last step never ran.
  await script([
    message([toolUse('toolu_check', 'bash_code_execution', { command: `${COUNT_SLEEPERS}; ls /mnt/user-data/outputs/` })], 'tool_use'),
    message([text('Checked the sandbox.')], 'end_turn'),
  ]);
  await page.fill('#prompt', 'Is it still running?');
  await page.press('#prompt', 'Enter');
  const checked = page.locator('article.message.assistant[data-complete="true"]', { hasText: 'Checked the sandbox.' });
  await checked.waitFor({ timeout: 60000 });
  await checked.locator('details[data-testid="execution-step"] summary').click();
  const stdout = await checked.locator('pre.stdout').innerText();
  assert.equal(stdout.split('\n')[0], '0', `no sleep 37 runs: ${stdout}`);
  assert.equal(stdout.includes('too-late.txt'), false, 'the rest of the stopped command never ran');

  // A reload keeps the thread (the URL names it), the stopped answer still marked.
  await page.reload();
  await page.locator('article.message.assistant.stopped .stopped-note').waitFor();
  assert.equal(await page.locator('article.message').count(), 4);
  assert.equal(await page.locator('.thread-item.active').getAttribute('data-thread-id'), threadId);
  await page.screenshot({ path: join(SHOTS, '17-reloaded.png') });

  // Rename in place (Enter saves); markup in a title is only text.
  await page.click('#rename-thread');
  await page.locator('#title-input').fill('Long job <b>bold</b>');
  await page.press('#title-input', 'Enter');
  await page.locator('#thread-title', { hasText: 'Long job <b>bold</b>' }).waitFor();
  assert.equal(await page.locator(`.thread-item[data-thread-id="${threadId}"]`).innerText(), 'Long job <b>bold</b>');
  await page.click('#new-thread');
  await page.waitForFunction((id) => !location.hash.endsWith(id), threadId);
  const second = await page.locator('.thread-item.active').getAttribute('data-thread-id');
  // Back returns to the renamed thread, Forward to the new one.
  await page.goBack();
  await page.locator(`.thread-item.active[data-thread-id="${threadId}"]`).waitFor();
  await page.locator('#thread-title', { hasText: 'Long job' }).waitFor();
  await page.goForward();
  await page.locator(`.thread-item.active[data-thread-id="${second}"]`).waitFor();
  await page.goBack();
  await page.locator(`.thread-item.active[data-thread-id="${threadId}"]`).waitFor();

  // Search by title.
  await page.fill('#thread-search', 'LONG jo');
  await page.waitForFunction(() => document.querySelectorAll('.thread-item').length === 1);
  assert.equal(await page.locator('.thread-item').getAttribute('data-thread-id'), threadId);
  await page.screenshot({ path: join(SHOTS, '18-search.png') });
  await page.fill('#thread-search', 'no title holds this');
  await page.locator('#no-threads', { hasText: 'No thread title holds' }).waitFor();
  await page.fill('#thread-search', '');
  await page.waitForFunction(() => document.querySelectorAll('.thread-item').length > 1);

  // Delete, confirmed in the page's own dialog (Cancel first changes nothing).
  await page.click('#delete-thread');
  await page.locator('#delete-dialog[open]').waitFor();
  await page.screenshot({ path: join(SHOTS, '19-delete-dialog.png') });
  await page.locator('#delete-cancel').click();
  await page.locator('#delete-dialog[open]').waitFor({ state: 'detached' });
  assert.equal(await page.locator(`.thread-item[data-thread-id="${threadId}"]`).count(), 1);
  await page.click('#delete-thread');
  await page.locator('#delete-confirm').click();
  await page.locator(`.thread-item[data-thread-id="${threadId}"]`).waitFor({ state: 'detached' });
  assert.equal(await page.locator('#thread-title').innerText(), 'No thread selected');
  const res = await fetch(`${stack.serverUrl}/api/v1/app/thread/${threadId}`, { headers: { Authorization: `Bearer ${TOKEN}` } });
  assert.equal(res.status, 404, 'deleted on the server');
  // A URL naming the deleted thread says so.
  await page.goto(`${stack.serverUrl}/#/thread/${threadId}`);
  await page.reload();
  await page.locator('#banner', { hasText: 'does not exist' }).waitFor();

  assert.deepEqual(seen.dialogs, [], 'no JavaScript dialog: rename and delete are in the page');
  assert.deepEqual(seen.external, [], 'no request left the page');
  assert.deepEqual(seen.errors.filter((e) => !e.includes('Failed to load resource')), [], 'no script errors');
  await context.close();
});
