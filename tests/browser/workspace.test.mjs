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
import { Stack, message as scriptedMessage, startServer, stopProgram } from '../harness.mjs';

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

  // After a reload the conversation comes back from the server, artifact included.
  await page.reload();
  await page.locator('#app').waitFor();
  await page.locator(`.thread-item[data-thread-id="${threadId}"]`).click();
  await page.locator('article.message.assistant img[data-testid="artifact-image"]').waitFor();
  assert.equal(await page.locator('#thread-title').innerText(), 'Please chart data.csv');
  assert.equal(await page.locator('#artifact-count').innerText(), '2');

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
