// Previews of a thread's files in the page: images inline, CSV and XLSX as scrollable
// tables (the first rows, the size said), PDF in the browser's own viewer, code
// highlighted, other text as text; anything else is a download. Every byte comes
// through the thread's download endpoint (the token, the organisation's settings) and
// every name or cell is set as text, never as markup.
import { download } from './api.js';
import { codeBlock } from './markdown.js';

export const PREVIEW_ROWS = 50;
const PREVIEW_COLUMNS = 40;
const MAX_TEXT_BYTES = 512 * 1024;
const MAX_XLSX_BYTES = 20 * 1024 * 1024;
const MAX_XLSX_PART_BYTES = 64 * 1024 * 1024;  // one XML part, inflated
const MAX_PDF_BYTES = 50 * 1024 * 1024;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

export function formatSize(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

// A file id is the base64url of its sandbox path; the download URL is built from it
// (and the thread), never taken from what a message says.
export function pathOfFileId(fileId) {
  const b64 = String(fileId).replace(/-/g, '+').replace(/_/g, '/');
  const bytes = Uint8Array.from(atob(b64 + '='.repeat((4 - (b64.length % 4)) % 4)), (c) => c.charCodeAt(0));
  return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
}

export function fileUrl(threadId, fileId) {
  const path = pathOfFileId(fileId);
  if (!/^\/mnt\/user-data\/(outputs|uploads)\//.test(path)) throw new Error('not a file of this thread');
  return `/api/v1/app/thread/${encodeURIComponent(threadId)}/download-file?path=${encodeURIComponent(path)}`;
}

const CODE_LANGUAGES = {
  py: 'python', js: 'javascript', mjs: 'javascript', ts: 'typescript', sh: 'bash', bash: 'bash', json: 'json',
  sql: 'sql', c: 'c', h: 'c', cc: 'cpp', cpp: 'cpp', hpp: 'cpp', go: 'go', rs: 'rust', java: 'java', rb: 'ruby',
  yaml: 'yaml', yml: 'yaml', xml: 'xml', html: 'xml', svg: 'xml', css: 'css', md: 'markdown', r: 'r', toml: 'ini',
  ini: 'ini', php: 'php', kt: 'kotlin', swift: 'swift', lua: 'lua', pl: 'perl',
};

// What kind of preview a file gets.
export function previewKind(filename, mime = '') {
  const ext = (/\.([A-Za-z0-9]+)$/.exec(filename || '') || [])[1]?.toLowerCase() || '';
  if (mime.startsWith('image/') && mime !== 'image/svg+xml') return 'image';
  if (ext === 'csv' || /csv/.test(mime)) return 'csv';
  if (ext === 'xlsx' || mime === 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet') return 'xlsx';
  if (ext === 'pdf' || mime === 'application/pdf') return 'pdf';
  if (CODE_LANGUAGES[ext]) return 'code';
  if (/^text\//.test(mime) || /^(txt|log|tsv)$/.test(ext)) return 'text';
  return null;
}

// Fills `target` with the preview of a file ({filename, mime_type, size_bytes}) whose
// bytes are at `url`.
export async function showPreview(target, file, url) {
  const kind = previewKind(file.filename, file.mime_type);
  target.replaceChildren();
  if (!kind) {
    target.append(el('p', { class: 'note', text: 'No preview for this kind of file: download it to open it.' }));
    return;
  }
  const size = file.size_bytes || 0;
  const limit = kind === 'xlsx' ? MAX_XLSX_BYTES : kind === 'pdf' ? MAX_PDF_BYTES : kind === 'image' ? MAX_PDF_BYTES : null;
  if (limit && size > limit) {
    target.append(el('p', { class: 'note', text: `Too large to preview (${formatSize(size)}): download it instead.` }));
    return;
  }
  if (kind === 'pdf' && navigator.pdfViewerEnabled === false) {
    target.append(el('p', { class: 'note', text: 'This browser shows no PDF inline: download it to open it.' }));
    return;
  }
  target.append(el('p', { class: 'note', text: 'Loading the preview…' }));
  try {
    const blob = await download(url);
    target.replaceChildren();
    if (kind === 'image') {
      target.append(el('img', { src: URL.createObjectURL(blob), alt: file.filename, 'data-testid': 'artifact-image' }));
    } else if (kind === 'pdf') {
      await pdfPreview(target, blob, file.filename);
    } else if (kind === 'xlsx') {
      target.append(await xlsxPreview(await blob.arrayBuffer()));
    } else {
      const truncated = blob.size > MAX_TEXT_BYTES;
      const text = await blob.slice(0, MAX_TEXT_BYTES).text();
      if (kind === 'csv') target.append(csvTable(text));
      else if (kind === 'code') target.append(codeBlock(firstLines(text, 400), CODE_LANGUAGES[extOf(file.filename)]));
      else target.append(el('pre', { class: 'text-preview', text: firstLines(text, 200) }));
      if (truncated) target.append(el('p', { class: 'note', text: `The first ${formatSize(MAX_TEXT_BYTES)} of ${formatSize(blob.size)} shown.` }));
    }
  } catch (e) {
    target.replaceChildren(el('p', { class: 'error', text: `No preview: ${e.describe ? e.describe() : e.message}` }));
  }
}

const extOf = (name) => ((/\.([A-Za-z0-9]+)$/.exec(name || '') || [])[1] || '').toLowerCase();
const firstLines = (text, n) => text.split('\n').slice(0, n).join('\n');

// The PDF in the browser's viewer, from a blob: URL of this page's own making (the page's
// CSP allows frames of blob: URLs only). The bytes must be a PDF and the blob is typed
// application/pdf whatever the server said, so it can only ever open the PDF viewer,
// never run as a document of this origin.
async function pdfPreview(target, blob, filename) {
  const head = new Uint8Array(await blob.slice(0, 5).arrayBuffer());
  if (String.fromCharCode(...head) !== '%PDF-') throw new Error('the file is not a PDF');
  const url = URL.createObjectURL(new Blob([blob], { type: 'application/pdf' }));
  const frame = el('iframe', { class: 'pdf-preview', src: url, title: `PDF preview of ${filename}`, 'data-testid': 'pdf-preview' });
  target.append(frame);
}

// ---------------------------------------------------------------------------------
// CSV

function csvTable(text) {
  const lines = text.split(/\r?\n/).filter((line) => line.length);
  const rows = lines.slice(0, PREVIEW_ROWS + 1).map(parseCsvLine);
  const table = el('table', { class: 'csv' });
  rows.forEach((cells, i) => {
    const tr = el('tr');
    for (const cell of cells.slice(0, PREVIEW_COLUMNS)) tr.append(el(i === 0 ? 'th' : 'td', { text: cell }));
    table.append(tr);
  });
  const wrap = el('div', { class: 'table-wrap' }, table);
  const shown = Math.max(0, rows.length - 1);
  const total = Math.max(0, lines.length - 1);
  return el('div', {}, el('p', { class: 'note', text: shown < total ? `${total} rows, the first ${shown} shown` : `${total} rows` }), wrap);
}

function parseCsvLine(line) {
  const cells = [];
  let cell = '';
  let quoted = false;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (quoted) {
      if (c === '"' && line[i + 1] === '"') { cell += '"'; i++; } else if (c === '"') quoted = false; else cell += c;
    } else if (c === '"') quoted = true;
    else if (c === ',') { cells.push(cell); cell = ''; } else cell += c;
  }
  cells.push(cell);
  return cells;
}

// ---------------------------------------------------------------------------------
// XLSX: a zip of XML parts, read with the browser's DecompressionStream('deflate-raw').

// The zip's entries by name: {method, offset, compressedSize}.
function zipEntries(buffer) {
  const view = new DataView(buffer);
  let eocd = -1;
  for (let p = buffer.byteLength - 22; p >= Math.max(0, buffer.byteLength - 22 - 65535); p--) {
    if (view.getUint32(p, true) === 0x06054b50) { eocd = p; break; }
  }
  if (eocd < 0) throw new Error('the file is not a zip (an XLSX is one)');
  const count = view.getUint16(eocd + 10, true);
  let p = view.getUint32(eocd + 16, true);
  const entries = new Map();
  const decoder = new TextDecoder();
  for (let i = 0; i < count; i++) {
    if (p + 46 > buffer.byteLength || view.getUint32(p, true) !== 0x02014b50) throw new Error('the zip directory is damaged');
    const method = view.getUint16(p + 10, true);
    const compressedSize = view.getUint32(p + 20, true);
    const nameLength = view.getUint16(p + 28, true);
    const extraLength = view.getUint16(p + 30, true);
    const commentLength = view.getUint16(p + 32, true);
    const local = view.getUint32(p + 42, true);
    const name = decoder.decode(new Uint8Array(buffer, p + 46, Math.min(nameLength, buffer.byteLength - p - 46)));
    entries.set(name, { method, local, compressedSize });
    p += 46 + nameLength + extraLength + commentLength;
  }
  return entries;
}

async function zipRead(buffer, entries, name) {
  const entry = entries.get(name);
  if (!entry) return null;
  const view = new DataView(buffer);
  const p = entry.local;
  if (p + 30 > buffer.byteLength || view.getUint32(p, true) !== 0x04034b50) throw new Error('the zip is damaged');
  const start = p + 30 + view.getUint16(p + 26, true) + view.getUint16(p + 28, true);
  if (start + entry.compressedSize > buffer.byteLength) throw new Error('the zip is cut short');
  const data = new Uint8Array(buffer, start, entry.compressedSize);
  if (entry.method === 0) return new TextDecoder().decode(data);
  if (entry.method !== 8) throw new Error(`the zip uses compression method ${entry.method}`);
  // Inflated in chunks with a cap: a small file that inflates to gigabytes stops here.
  const stream = new Blob([data]).stream().pipeThrough(new DecompressionStream('deflate-raw'));
  const reader = stream.getReader();
  const chunks = [];
  let total = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > MAX_XLSX_PART_BYTES) {
      await reader.cancel();
      throw new Error(`${name} inflates past ${formatSize(MAX_XLSX_PART_BYTES)}`);
    }
    chunks.push(value);
  }
  return new TextDecoder().decode(await new Blob(chunks).arrayBuffer());
}

function parseXml(text, name) {
  const doc = new DOMParser().parseFromString(text, 'application/xml');
  if (doc.getElementsByTagName('parsererror').length) throw new Error(`${name} is not well-formed XML`);
  return doc;
}
const byName = (node, local) => [...node.getElementsByTagNameNS('*', local)];
// A string item's text: its runs' <t>, not the phonetic guide's (<rPh>).
const textOf = (node) => byName(node, 't').filter((t) => t.parentElement?.localName !== 'rPh')
  .map((t) => t.textContent).join('');

function columnIndex(ref) {
  const letters = (/^[A-Z]+/.exec(ref || '') || [''])[0];
  let n = 0;
  for (const c of letters) n = n * 26 + (c.charCodeAt(0) - 64);
  return n - 1;
}

// The sheets of an XLSX: each one's name, size, and first rows as a table.
export async function xlsxPreview(buffer) {
  const entries = zipEntries(buffer);
  const workbookText = await zipRead(buffer, entries, 'xl/workbook.xml');
  if (!workbookText) throw new Error('the file has no xl/workbook.xml (not an XLSX)');
  const workbook = parseXml(workbookText, 'xl/workbook.xml');
  const relsText = await zipRead(buffer, entries, 'xl/_rels/workbook.xml.rels');
  const targets = new Map();
  if (relsText) {
    for (const rel of byName(parseXml(relsText, 'workbook.xml.rels'), 'Relationship')) {
      const target = rel.getAttribute('Target') || '';
      targets.set(rel.getAttribute('Id'), target.startsWith('/') ? target.slice(1) : `xl/${target}`);
    }
  }
  const sharedText = await zipRead(buffer, entries, 'xl/sharedStrings.xml');
  const shared = sharedText ? byName(parseXml(sharedText, 'sharedStrings.xml'), 'si').map(textOf) : [];
  const out = el('div', { class: 'xlsx', 'data-testid': 'xlsx-preview' });
  const sheets = byName(workbook, 'sheet');
  let index = 0;
  for (const sheet of sheets) {
    index++;
    const name = sheet.getAttribute('name') || `Sheet ${index}`;
    const rid = sheet.getAttributeNS('http://schemas.openxmlformats.org/officeDocument/2006/relationships', 'id') ||
      sheet.getAttribute('r:id');
    const part = targets.get(rid) || `xl/worksheets/sheet${index}.xml`;
    const sheetText = await zipRead(buffer, entries, part);
    const section = el('section', { class: 'sheet', 'data-sheet': name });
    section.append(el('h4', { text: name }));
    out.append(section);
    if (!sheetText) { section.append(el('p', { class: 'note', text: 'This sheet has no data part.' })); continue; }
    const rows = byName(parseXml(sheetText, part), 'row');
    let width = 0;
    const grid = [];
    for (const row of rows) {
      const cells = [];
      let next = 0;
      for (const c of byName(row, 'c')) {
        const at = c.getAttribute('r') ? columnIndex(c.getAttribute('r')) : next;
        next = at + 1;
        const type = c.getAttribute('t');
        const v = byName(c, 'v')[0];
        let value = v ? v.textContent : '';
        if (type === 's') value = shared[Number(value)] ?? '';
        else if (type === 'inlineStr') value = byName(c, 'is').map(textOf).join('');
        else if (type === 'b') value = value === '1' ? 'TRUE' : 'FALSE';
        if (at >= 0 && at < 16384) cells[at] = value;
      }
      width = Math.max(width, cells.length);
      if (grid.length < PREVIEW_ROWS) grid.push(cells);
    }
    const shownColumns = Math.min(width, PREVIEW_COLUMNS);
    const said = `${rows.length} row${rows.length === 1 ? '' : 's'} × ${width} column${width === 1 ? '' : 's'}` +
      (rows.length > grid.length || width > shownColumns
        ? `, the first ${grid.length} rows${width > shownColumns ? ` and ${shownColumns} columns` : ''} shown` : '');
    section.append(el('p', { class: 'note sheet-size', text: said }));
    const table = el('table', { class: 'csv' });
    const head = el('tr', {}, el('th', { text: '' }));
    for (let i = 0; i < shownColumns; i++) head.append(el('th', { text: columnName(i), scope: 'col' }));
    table.append(el('thead', {}, head));
    const body = el('tbody');
    grid.forEach((cells, r) => {
      const tr = el('tr', {}, el('th', { text: String(Number(rows[r].getAttribute('r')) || r + 1), scope: 'row' }));
      for (let i = 0; i < shownColumns; i++) tr.append(el('td', { text: cells[i] ?? '' }));
      body.append(tr);
    });
    table.append(body);
    section.append(el('div', { class: 'table-wrap sheet-table' }, table));
  }
  if (!sheets.length) out.append(el('p', { class: 'note', text: 'The workbook has no sheets.' }));
  return out;
}

function columnName(i) {
  let name = '';
  for (let n = i + 1; n > 0; n = Math.floor((n - 1) / 26)) name = String.fromCharCode(65 + ((n - 1) % 26)) + name;
  return name;
}
