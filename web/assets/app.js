// The Workspace page: sign in, threads, the chat with streamed answers, uploads and
// artifacts. Plain modules, no build step.
import * as api from './api.js';
import { el, formatSize, MessageView, artifactCard } from './render.js';

const $ = (id) => document.getElementById(id);
const state = { threads: [], current: null, features: null, busy: false, lastThreadId: null };

function describe(error) { return error && error.describe ? error.describe() : String(error && error.message || error); }

function showBanner(text) {
  $('banner-text').textContent = text;
  $('banner').hidden = false;
}
function hideBanner() { $('banner').hidden = true; }
function setStatus(text) { $('status').textContent = text; }

// ---------------------------------------------------------------------------------
// Sign in

async function signIn(tokenValue) {
  api.setToken(tokenValue);
  try {
    state.features = await api.features();
  } catch (e) {
    api.clearToken();
    throw e;
  }
  $('signin').hidden = true;
  $('app').hidden = false;
  applyFeatures();
  await loadThreads();
}

function showSignIn(message) {
  $('app').hidden = true;
  $('signin').hidden = false;
  $('signin-error').hidden = !message;
  $('signin-error').textContent = message || '';
  $('token').focus();
}

function applyFeatures() {
  const f = state.features;
  const note = $('feature-note');
  const toggle = $('code-toggle');
  const notes = [];
  if (!f.code_execution.enabled) {
    notes.push('Code execution is turned off by the operator: the assistant answers without running code.');
    toggle.checked = false;
    toggle.disabled = true;
  } else if (!f.code_execution.available) {
    notes.push('Code execution is unavailable on this server right now (no sandbox runtime).');
  }
  if (!f.model.configured) notes.push('No model is configured on this server: messages cannot be answered.');
  note.hidden = notes.length === 0;
  note.textContent = notes.join(' ');
}

// ---------------------------------------------------------------------------------
// Threads

async function loadThreads() {
  try {
    const page = await api.listThreads();
    state.threads = page.data;
    $('more-threads').hidden = !page.has_more;
    renderThreadList();
  } catch (e) {
    handleError(e);
  }
}

async function loadMoreThreads() {
  try {
    const page = await api.listThreads(state.threads[state.threads.length - 1].id);
    state.threads.push(...page.data);
    $('more-threads').hidden = !page.has_more;
    renderThreadList();
  } catch (e) {
    handleError(e);
  }
}

function renderThreadList() {
  const list = $('thread-list');
  list.replaceChildren();
  for (const thread of state.threads) {
    const button = el('button', { type: 'button', class: 'thread-item', text: thread.title || 'New thread',
      'data-thread-id': thread.id, title: thread.title || 'New thread' });
    if (state.current && state.current.id === thread.id) {
      button.classList.add('active');
      button.setAttribute('aria-current', 'true');
    }
    button.addEventListener('click', () => openThread(thread.id));
    list.append(el('li', {}, button));
  }
}

async function newThread() {
  try {
    const thread = await api.createThread();
    state.threads.unshift(thread);
    await openThread(thread.id);
    $('prompt').focus();
  } catch (e) {
    handleError(e);
  }
}

async function openThread(id) {
  try {
    const thread = await api.getThread(id);
    if (!state.current || state.current.id !== thread.id) $('uploads').replaceChildren();
    state.current = thread;
    renderThread();
    renderThreadList();
    if (window.matchMedia('(max-width: 720px)').matches) setSidebar(false);
  } catch (e) {
    handleError(e);
  }
}

function renderThread() {
  const thread = state.current;
  $('thread-title').textContent = thread ? (thread.title || 'New thread') : 'No thread selected';
  for (const id of ['rename-thread', 'delete-thread', 'prompt', 'send', 'attach'])
    $(id).disabled = !thread || (state.busy && id !== 'rename-thread');
  const messages = $('messages');
  messages.replaceChildren();
  if (!thread) return;
  if (!thread.messages.length)
    messages.append(el('p', { class: 'empty', text: 'No messages yet. Ask something, or attach a file first.' }));
  for (const message of thread.messages) messages.append(MessageView.fromStored(message, thread.id).node);
  messages.scrollTop = messages.scrollHeight;
  loadArtifacts();
}

async function loadArtifacts() {
  const thread = state.current;
  if (!thread) return;
  try {
    const artifacts = (await api.listArtifacts(thread.id)).data;
    $('artifacts-panel').hidden = artifacts.length === 0;
    $('artifact-count').textContent = String(artifacts.length);
    const list = $('artifact-list');
    list.replaceChildren();
    for (const a of artifacts)
      list.append(el('li', {}, el('span', { text: `${a.filename} (${a.mime_type}, ${formatSize(a.size_bytes)})` })));
  } catch (e) {
    handleError(e);
  }
}

async function renameThread() {
  const thread = state.current;
  const title = window.prompt('New title for this thread', thread.title || '');
  if (title === null) return;
  try {
    const renamed = await api.renameThread(thread.id, title.trim());
    thread.title = renamed.title;
    const item = state.threads.find((t) => t.id === thread.id);
    if (item) item.title = renamed.title;
    renderThreadList();
    $('thread-title').textContent = renamed.title || 'New thread';
  } catch (e) {
    handleError(e);
  }
}

async function deleteThread() {
  const thread = state.current;
  if (!window.confirm(`Delete “${thread.title || 'New thread'}” with its files? This cannot be undone.`)) return;
  try {
    await api.deleteThread(thread.id);
    state.threads = state.threads.filter((t) => t.id !== thread.id);
    state.current = null;
    renderThread();
    renderThreadList();
    $('artifacts-panel').hidden = true;
  } catch (e) {
    handleError(e);
  }
}

// ---------------------------------------------------------------------------------
// Chat

async function send() {
  const thread = state.current;
  const content = $('prompt').value.trim();
  if (!thread || !content || state.busy) return;
  hideBanner();
  setBusy(true);
  const messages = $('messages');
  messages.querySelector('.empty')?.remove();
  messages.querySelectorAll('.message.unsent').forEach((node) => node.remove());
  const user = MessageView.fromStored({ role: 'user', content }, thread.id);
  messages.append(user.node);
  const answer = new MessageView('assistant', thread.id);
  answer.node.classList.add('streaming');
  messages.append(answer.node);
  messages.scrollTop = messages.scrollHeight;
  setStatus('Thinking…');
  const body = { content };
  if ($('code-toggle').checked && !$('code-toggle').disabled) body.pgpt = { tools: ['code_execution'] };
  let failed = null;
  try {
    await api.sendMessage(thread.id, body, (name, data) => {
      if (name === 'content_block_start') {
        answer.startBlock(data.index, data.content_block);
        if (data.content_block.type === 'server_tool_use') setStatus('Running code…');
        else if (data.content_block.type === 'text') setStatus('Writing…');
      } else if (name === 'content_block_delta') {
        answer.delta(data.index, data.delta);
      } else if (name === 'content_block_stop') {
        answer.stopBlock(data.index);
      } else if (name === 'error') {
        failed = new api.ApiError(0, data.error.type, data.error.message);
      }
      messages.scrollTop = messages.scrollHeight;
    });
    $('prompt').value = '';
  } catch (e) {
    failed = e;
  }
  answer.node.classList.remove('streaming');
  setBusy(false);
  setStatus('');
  if (failed) {
    user.node.classList.add('unsent');
    answer.node.remove();
    showBanner(`The message was not answered: ${describe(failed)}`);
    return;
  }
  answer.node.setAttribute('data-complete', 'true');
  // The title and the stored ids come from the server.
  try {
    const fresh = await api.getThread(thread.id);
    if (state.current && state.current.id === fresh.id) {
      state.current = fresh;
      $('thread-title').textContent = fresh.title || 'New thread';
    }
    const item = state.threads.find((t) => t.id === fresh.id);
    if (item) item.title = fresh.title;
    renderThreadList();
    loadArtifacts();
  } catch (e) {
    handleError(e);
  }
  $('prompt').focus();
}

function setBusy(busy) {
  state.busy = busy;
  for (const id of ['prompt', 'send', 'attach', 'delete-thread']) $(id).disabled = busy || !state.current;
}

// ---------------------------------------------------------------------------------
// Uploads

async function upload(files) {
  const thread = state.current;
  if (!thread) {
    showBanner('Create or pick a thread first: files are uploaded into a thread.');
    return;
  }
  for (const file of files) {
    const bar = el('progress', { max: 1, value: 0 });
    const label = el('span', { text: `${file.name} (${formatSize(file.size)})` });
    const row = el('div', { class: 'upload', 'data-testid': 'upload', 'data-filename': file.name }, label, bar);
    $('uploads').append(row);
    try {
      if (state.features && file.size > state.features.max_upload_bytes)
        throw new api.ApiError(413, 'request_too_large', `${file.name} is larger than the server's limit of ${formatSize(state.features.max_upload_bytes)}.`);
      await api.uploadFile(thread.id, file, (fraction) => { bar.value = fraction; });
      bar.value = 1;
      row.classList.add('done');
      label.textContent = `Uploaded ${file.name} (${formatSize(file.size)}) to /mnt/user-data/uploads/`;
    } catch (e) {
      row.classList.add('failed');
      label.textContent = `${file.name}: ${describe(e)}`;
      showBanner(`Upload failed: ${describe(e)}`);
    }
  }
}

// ---------------------------------------------------------------------------------
// Errors

function handleError(e) {
  if (e && e.status === 401) {
    api.clearToken();
    showSignIn('Your token was refused. Sign in again.');
    return;
  }
  showBanner(describe(e));
}

function setSidebar(open) {
  $('sidebar').classList.toggle('closed', !open);
  $('toggle-sidebar').setAttribute('aria-expanded', String(open));
}

// ---------------------------------------------------------------------------------
// Wiring

function wire() {
  $('signin-form').addEventListener('submit', async (event) => {
    event.preventDefault();
    const value = $('token').value.trim();
    if (!value) return;
    $('signin-button').disabled = true;
    try {
      await signIn(value);
      $('token').value = '';
    } catch (e) {
      showSignIn(e.status === 401 ? 'That token was not accepted.' : describe(e));
    } finally {
      $('signin-button').disabled = false;
    }
  });
  $('sign-out').addEventListener('click', () => {
    api.clearToken();
    state.current = null;
    showSignIn('');
  });
  $('new-thread').addEventListener('click', newThread);
  $('more-threads').addEventListener('click', loadMoreThreads);
  $('rename-thread').addEventListener('click', renameThread);
  $('delete-thread').addEventListener('click', deleteThread);
  $('banner-close').addEventListener('click', hideBanner);
  $('toggle-sidebar').addEventListener('click', () => setSidebar($('sidebar').classList.contains('closed')));
  $('composer').addEventListener('submit', (event) => { event.preventDefault(); send(); });
  $('prompt').addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  $('attach').addEventListener('click', () => $('file-input').click());
  $('file-input').addEventListener('change', () => {
    upload([...$('file-input').files]);
    $('file-input').value = '';
  });
  const main = $('main');
  let depth = 0;
  main.addEventListener('dragenter', (e) => {
    if (!e.dataTransfer || ![...e.dataTransfer.types].includes('Files')) return;
    depth++;
    $('drop-overlay').hidden = false;
  });
  main.addEventListener('dragleave', () => { if (--depth <= 0) { depth = 0; $('drop-overlay').hidden = true; } });
  main.addEventListener('dragover', (e) => e.preventDefault());
  main.addEventListener('drop', (e) => {
    e.preventDefault();
    depth = 0;
    $('drop-overlay').hidden = true;
    if (e.dataTransfer && e.dataTransfer.files.length) upload([...e.dataTransfer.files]);
  });
}

wire();
if (api.token()) {
  signIn(api.token()).catch((e) => showSignIn(e.status === 401 ? 'Your session ended. Sign in again.' : describe(e)));
} else {
  showSignIn('');
}
