// Turning a conversation into elements. Text from the model or a file is only ever
// set as textContent: nothing it says becomes markup.
import { download, fileContentUrl } from './api.js';

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else if (key.startsWith('data-') || key.startsWith('aria-') || key === 'role' || key === 'title')
      node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

export function formatSize(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

// Markdown as text: fenced code blocks become <pre><code>, inline `code` becomes
// <code>, the rest stays text in paragraphs.
export function renderText(target, text) {
  target.replaceChildren();
  const parts = text.split(/^```/m);
  parts.forEach((part, i) => {
    if (i % 2 === 1) {
      const newline = part.indexOf('\n');
      const language = newline >= 0 ? part.slice(0, newline).trim() : '';
      const code = newline >= 0 ? part.slice(newline + 1) : part;
      const pre = el('pre', { class: 'code' }, el('code', { text: code.replace(/\n$/, '') }));
      if (language) pre.setAttribute('data-language', language);
      target.append(pre);
      return;
    }
    for (const raw of part.split(/\n{2,}/)) {
      const paragraph = raw.replace(/^\n+|\n+$/g, '');
      if (!paragraph.trim()) continue;
      const p = el('p');
      paragraph.split(/(`[^`\n]+`)/).forEach((piece) => {
        if (piece.startsWith('`') && piece.endsWith('`') && piece.length > 1) p.append(el('code', { text: piece.slice(1, -1) }));
        else p.append(document.createTextNode(piece));
      });
      target.append(p);
    }
  });
}

// One assistant or user message; blocks are added as they arrive.
export class MessageView {
  // `threadId`: the thread whose container holds the message's artifacts.
  constructor(role, threadId) {
    this.threadId = threadId;
    this.node = el('article', { class: `message ${role}`, 'data-role': role });
    this.node.append(el('div', { class: 'who', text: role === 'user' ? 'You' : 'Assistant' }));
    this.body = el('div', { class: 'body' });
    this.node.append(this.body);
    this.blocks = [];
    this.steps = new Map();  // server_tool_use id -> step view
  }

  startBlock(index, block) {
    let view;
    if (block.type === 'text') {
      view = { kind: 'text', text: block.text || '', node: el('div', { class: 'text' }) };
      renderText(view.node, view.text);
    } else if (block.type === 'server_tool_use') {
      view = this.stepView(block);
    } else if (block.type && block.type.endsWith('_tool_result')) {
      view = { kind: 'result', node: null };
      const step = this.steps.get(block.tool_use_id);
      if (step) step.showResult(block.content);
    } else if (block.type === 'zylon-resource') {
      view = { kind: 'resource', node: artifactCard(block, this.threadId) };
    } else {
      view = { kind: 'other', node: null };
    }
    this.blocks[index] = view;
    if (view.node) this.body.append(view.node);
  }

  delta(index, delta) {
    const view = this.blocks[index];
    if (!view) return;
    if (view.kind === 'text' && delta.type === 'text_delta') {
      view.text += delta.text;
      renderText(view.node, view.text);
    } else if (view.kind === 'step' && delta.type === 'input_json_delta') {
      view.partial += delta.partial_json;
    }
  }

  stopBlock(index) {
    const view = this.blocks[index];
    if (view && view.kind === 'step' && view.partial) {
      try { view.setInput(JSON.parse(view.partial)); } catch { /* keep what is shown */ }
    }
  }

  stepView(block) {
    const summary = el('summary', {}, el('span', { class: 'step-label', text: stepLabel(block.name, block.input) }));
    const command = el('pre', { class: 'command' });
    const output = el('div', { class: 'output', text: 'Running…' });
    const node = el('details', { class: 'step', 'data-testid': 'execution-step' }, summary, command, output);
    const view = {
      kind: 'step', node, partial: '',
      setInput(input) {
        summary.firstChild.textContent = stepLabel(block.name, input);
        command.textContent = block.name === 'bash_code_execution'
          ? `$ ${input.command || ''}` : JSON.stringify(input, null, 2);
      },
      showResult(content) {
        output.replaceChildren();
        if (!content) return;
        if (content.type && content.type.endsWith('_error')) {
          output.append(el('p', { class: 'error', text: `Error: ${content.error_code}${content.detail ? ` — ${content.detail.explanation}` : ''}` }));
          node.classList.add('failed');
          return;
        }
        if (content.type === 'bash_code_execution_result') {
          if (content.stdout) output.append(el('pre', { class: 'stdout', text: content.stdout }));
          if (content.stderr) output.append(el('pre', { class: 'stderr', text: content.stderr }));
          output.append(el('p', { class: 'rc', text: `exit code ${content.return_code}` }));
          if (content.return_code !== 0) node.classList.add('failed');
          return;
        }
        output.append(el('pre', { class: 'stdout', text: content.content ?? JSON.stringify(content, null, 2) }));
      },
    };
    if (block.input && Object.keys(block.input).length) view.setInput(block.input);
    this.steps.set(block.id, view);
    return view;
  }

  // A whole stored message.
  static fromStored(message, threadId) {
    const view = new MessageView(message.role, threadId);
    if (typeof message.content === 'string') {
      view.startBlock(0, { type: 'text', text: message.content });
    } else {
      (message.content || []).forEach((block, i) => view.startBlock(i, block));
    }
    return view;
  }
}

function stepLabel(name, input) {
  if (name === 'bash_code_execution') {
    const command = input && input.command ? input.command.split('\n')[0] : '';
    return `Ran a command${command ? `: ${command.slice(0, 80)}` : ''}`;
  }
  if (input && input.command) return `Edited a file: ${input.command} ${input.path || ''}`;
  return 'Used the file editor';
}

const textTypes = /^(text\/|application\/(json|xml|csv|x-yaml))/;

// An artifact: images inline, CSV and text previewed, every file downloadable. Its bytes
// come from the thread's container by file id (never from a URL a block carries).
export function artifactCard(resource, threadId) {
  const contentUrl = fileContentUrl(threadId, resource.file_id);
  const card = el('div', { class: 'artifact', 'data-testid': 'artifact', 'data-filename': resource.filename });
  card.append(el('div', { class: 'artifact-head' },
    el('strong', { text: resource.filename }),
    el('span', { class: 'meta', text: ` ${resource.mime_type} · ${formatSize(resource.size_bytes || 0)}` })));
  const preview = el('div', { class: 'preview' });
  card.append(preview);
  const actions = el('div', { class: 'artifact-actions' });
  card.append(actions);
  if (resource.downloadable === false) {
    actions.append(el('span', { class: 'note', text: 'Downloads of generated files are turned off by your organisation.' }));
    return card;
  }
  const button = el('button', { type: 'button', text: `Download ${resource.filename}`, 'data-testid': 'download' });
  button.addEventListener('click', async () => {
    try {
      const blob = await download(contentUrl);
      const url = URL.createObjectURL(blob);
      const a = el('a', { href: url, download: resource.filename });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
    } catch (e) {
      actions.append(el('p', { class: 'error', role: 'alert', text: `Download failed: ${e.describe ? e.describe() : e.message}` }));
    }
  });
  actions.append(button);
  loadPreview(resource, contentUrl, preview);
  return card;
}

async function loadPreview(resource, contentUrl, preview) {
  const mime = resource.mime_type || '';
  const isImage = mime.startsWith('image/') && mime !== 'image/svg+xml';
  const isText = textTypes.test(mime) || /\.(csv|txt|md|json|log)$/i.test(resource.filename);
  if (!isImage && !isText) return;
  if (isText && resource.size_bytes > 512 * 1024) {
    preview.append(el('p', { class: 'note', text: 'Too large to preview; download it instead.' }));
    return;
  }
  try {
    const blob = await download(contentUrl);
    if (isImage) {
      const img = el('img', { src: URL.createObjectURL(blob), alt: resource.filename, 'data-testid': 'artifact-image' });
      preview.append(img);
      return;
    }
    const text = await blob.text();
    if (/csv/.test(mime) || /\.csv$/i.test(resource.filename)) preview.append(csvTable(text));
    else preview.append(el('pre', { class: 'text-preview', text: text.split('\n').slice(0, 40).join('\n') }));
  } catch (e) {
    preview.append(el('p', { class: 'error', text: `No preview: ${e.describe ? e.describe() : e.message}` }));
  }
}

// The first rows of a CSV file (simple quoting) as a table.
function csvTable(text) {
  const rows = text.split(/\r?\n/).filter((line) => line.length).slice(0, 21).map(parseCsvLine);
  const table = el('table', { class: 'csv' });
  rows.forEach((cells, i) => {
    const tr = el('tr');
    for (const cell of cells) tr.append(el(i === 0 ? 'th' : 'td', { text: cell }));
    table.append(tr);
  });
  return el('div', { class: 'table-wrap' }, table);
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
