// Turning a conversation into elements. The model's text is markdown, rendered by
// markdown.js (sanitised: nothing it says becomes script or a request); everything
// else from the model or a file (commands, output, file names) is set as textContent.
import { download } from './api.js';
import { renderMarkdown } from './markdown.js';
import { fileUrl, formatSize, previewKind, showPreview } from './preview.js';

export { formatSize };

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

// A user's message is shown as typed; the assistant's as markdown.
function renderText(target, text, role) {
  if (role === 'user') {
    target.replaceChildren(...text.split(/\n{2,}/).filter((p) => p.trim()).map((p) => el('p', { class: 'plain', text: p })));
    return;
  }
  renderMarkdown(target, text);
}

// Saves a file's bytes under its name (the token goes in a header, so not a plain link).
export async function saveFile(url, filename) {
  const blob = await download(url);
  const objectUrl = URL.createObjectURL(blob);
  const a = el('a', { href: objectUrl, download: filename });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(objectUrl), 60_000);
}

// One assistant or user message; blocks are added as they arrive.
export class MessageView {
  constructor(role, threadId) {
    this.role = role;
    this.threadId = threadId;
    this.node = el('article', { class: `message ${role}`, 'data-role': role });
    this.node.append(el('div', { class: 'who', text: role === 'user' ? 'You' : 'Assistant' }));
    this.body = el('div', { class: 'body' });
    this.node.append(this.body);
    this.blocks = [];
    this.steps = new Map();  // server_tool_use id -> step view
    this.pendingRender = new Set();
  }

  startBlock(index, block) {
    let view;
    if (block.type === 'text') {
      view = { kind: 'text', text: block.text || '', node: el('div', { class: 'text' }) };
      renderText(view.node, view.text, this.role);
    } else if (block.type === 'server_tool_use') {
      view = this.stepView(block);
    } else if (block.type && block.type.endsWith('_tool_result')) {
      view = { kind: 'result', node: null };
      const step = this.steps.get(block.tool_use_id);
      if (step) step.showResult(block.content);
    } else if (block.type === 'zylon-resource') {
      view = { kind: 'resource', node: artifactCard(this.threadId, block) };
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
      this.scheduleRender(view);
    } else if (view.kind === 'step' && delta.type === 'input_json_delta') {
      view.partial += delta.partial_json;
    }
  }

  // Streamed text is re-rendered at most once a frame (markdown needs the whole text).
  scheduleRender(view) {
    if (this.pendingRender.has(view)) return;
    this.pendingRender.add(view);
    requestAnimationFrame(() => {
      this.pendingRender.delete(view);
      renderText(view.node, view.text, this.role);
    });
  }

  stopBlock(index) {
    const view = this.blocks[index];
    if (view && view.kind === 'text') renderText(view.node, view.text, this.role);
    if (view && view.kind === 'step' && view.partial) {
      try { view.setInput(JSON.parse(view.partial)); } catch { /* keep what is shown */ }
    }
  }

  // A running command's output as it comes (the execution_output event).
  output(event) {
    const step = this.steps.get(event.tool_use_id);
    if (step) step.appendOutput(event.stream, event.text);
  }

  markStopped() {
    this.node.classList.add('stopped');
    if (!this.node.querySelector('.stopped-note'))
      this.node.append(el('p', { class: 'stopped-note', text: 'Stopped: the answer was cut short at your request.' }));
    for (const step of this.steps.values()) step.markStopped();
  }

  stepView(block) {
    const summary = el('summary', {}, el('span', { class: 'step-label', text: stepLabel(block.name, block.input) }));
    const command = el('pre', { class: 'command' });
    const live = el('pre', { class: 'live-output', 'aria-live': 'off', 'data-testid': 'live-output' });
    live.hidden = true;
    const output = el('div', { class: 'output', text: 'Running…' });
    const node = el('details', { class: 'step running', 'data-testid': 'execution-step' }, summary, command, live, output);
    let liveBytes = 0;
    const view = {
      kind: 'step', node, partial: '',
      setInput(input) {
        summary.firstChild.textContent = stepLabel(block.name, input);
        command.textContent = block.name === 'bash_code_execution'
          ? `$ ${input.command || ''}` : JSON.stringify(input, null, 2);
      },
      appendOutput(stream, text) {
        // The last 64 KiB shown while it runs; the result replaces it at the end.
        live.hidden = false;
        const span = el('span', { class: stream === 'stderr' ? 'stderr' : 'stdout', text });
        live.append(span);
        liveBytes += text.length;
        while (liveBytes > 65536 && live.firstChild) {
          liveBytes -= live.firstChild.textContent.length;
          live.firstChild.remove();
        }
        live.scrollTop = live.scrollHeight;
      },
      markStopped() {
        if (!node.classList.contains('running')) return;
        node.classList.remove('running');
        node.classList.add('failed');
        output.replaceChildren(el('p', { class: 'error', text: 'Stopped before it finished.' }));
      },
      showResult(content) {
        node.classList.remove('running');
        live.hidden = true;
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
    if (message.stopped) view.markStopped();
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

// A file of the thread (an artifact block, or a row of the files list): its name and
// size, its preview, its download. The URL comes from the file id and the thread.
export function artifactCard(threadId, file, { previewNow = true } = {}) {
  const card = el('div', { class: 'artifact', 'data-testid': 'artifact', 'data-filename': file.filename });
  card.append(el('div', { class: 'artifact-head' },
    el('strong', { text: file.filename }),
    el('span', { class: 'meta', text: ` ${file.mime_type || 'file'} · ${formatSize(file.size_bytes || 0)}` })));
  const preview = el('div', { class: 'preview' });
  card.append(preview);
  const actions = el('div', { class: 'artifact-actions' });
  card.append(actions);
  if (file.downloadable === false) {
    actions.append(el('span', { class: 'note', text: 'Downloads of these files are turned off by your organisation.' }));
    return card;
  }
  let url;
  try {
    url = fileUrl(threadId, file.file_id);
  } catch {
    actions.append(el('span', { class: 'error', text: 'This file cannot be opened here.' }));
    return card;
  }
  const button = el('button', { type: 'button', text: `Download ${file.filename}`, 'data-testid': 'download' });
  button.addEventListener('click', async () => {
    try {
      await saveFile(url, file.filename);
    } catch (e) {
      actions.append(el('p', { class: 'error', role: 'alert', text: `Download failed: ${e.describe ? e.describe() : e.message}` }));
    }
  });
  actions.append(button);
  if (!previewKind(file.filename, file.mime_type)) return card;
  if (previewNow) {
    showPreview(preview, file, url);
  } else {
    const show = el('button', { type: 'button', text: 'Preview', 'aria-expanded': 'false', 'data-testid': 'preview' });
    show.addEventListener('click', () => {
      const open = show.getAttribute('aria-expanded') === 'true';
      show.setAttribute('aria-expanded', String(!open));
      show.textContent = open ? 'Preview' : 'Hide preview';
      if (open) preview.replaceChildren();
      else showPreview(preview, file, url);
    });
    actions.prepend(show);
  }
  return card;
}
