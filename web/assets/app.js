// The Workspace page: sign in, threads (search, rename, delete; the URL names the open
// one), the chat with streamed answers that can be stopped, uploads, and the thread's
// files with previews. Plain modules, no build step; the third-party libraries are in
// assets/vendor/ (scripts/web-vendor.sh).
import * as api from './api.js';
import { el, formatSize, MessageView, artifactCard } from './render.js';

const $ = (id) => document.getElementById(id);
const state = { threads: [], current: null, features: null, busy: false, query: '', turn: null };

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
  await followUrl();
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
// The URL: #/thread/<id> names the open thread, so a reload or Back finds it again.

const THREAD_HASH = /^#\/thread\/([A-Za-z0-9_-]{1,200})$/;
const threadInUrl = () => (THREAD_HASH.exec(location.hash) || [])[1] || null;

function setUrl(id, replace = false) {
  const hash = id ? `#/thread/${id}` : '#';
  if (location.hash === hash || (!id && !location.hash)) return;
  if (replace) history.replaceState(null, '', hash);
  else history.pushState(null, '', hash);
}

async function followUrl() {
  const id = threadInUrl();
  if (id && (!state.current || state.current.id !== id)) await openThread(id, { fromUrl: true });
  else if (!id && state.current) closeThread();
}

// ---------------------------------------------------------------------------------
// Threads

async function loadThreads() {
  try {
    const query = state.query;
    const page = await api.listThreads(undefined, query);
    if (query !== state.query) return;  // a newer search answered first
    state.threads = page.data;
    $('more-threads').hidden = !page.has_more;
    renderThreadList();
  } catch (e) {
    handleError(e);
  }
}

async function loadMoreThreads() {
  try {
    const page = await api.listThreads(state.threads[state.threads.length - 1].id, state.query);
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
  $('no-threads').hidden = state.threads.length > 0;
  $('no-threads').textContent = state.query ? `No thread title holds “${state.query}”.` : 'No threads yet.';
}

let searchTimer = null;
function onSearch() {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(() => {
    state.query = $('thread-search').value.trim();
    loadThreads();
  }, 200);
}

async function newThread() {
  try {
    const thread = await api.createThread();
    if (!state.query) state.threads.unshift(thread);
    await openThread(thread.id);
    $('prompt').focus();
  } catch (e) {
    handleError(e);
  }
}

async function openThread(id, { fromUrl = false } = {}) {
  if (state.busy && state.current && state.current.id !== id) {
    showBanner('A message is being answered: stop it or wait before opening another thread.');
    if (fromUrl) setUrl(state.current.id, true);
    return;
  }
  try {
    const thread = await api.getThread(id);
    if (!state.current || state.current.id !== thread.id) $('uploads').replaceChildren();
    state.current = thread;
    setUrl(thread.id, fromUrl);
    renderThread();
    renderThreadList();
    if (window.matchMedia('(max-width: 720px)').matches) setSidebar(false);
  } catch (e) {
    if (e && e.status === 404) {
      showBanner(`That thread does not exist (any more): ${id}`);
      closeThread();
      setUrl(null, true);
      return;
    }
    handleError(e);
  }
}

function closeThread() {
  state.current = null;
  renderThread();
  renderThreadList();
}

function renderThread() {
  const thread = state.current;
  $('thread-title').textContent = thread ? (thread.title || 'New thread') : 'No thread selected';
  document.title = thread ? `${thread.title || 'New thread'} · sandboxd Workspace` : 'sandboxd Workspace';
  for (const id of ['rename-thread', 'delete-thread', 'prompt', 'send', 'attach'])
    $(id).disabled = !thread || (state.busy && id !== 'rename-thread');
  const messages = $('messages');
  messages.replaceChildren();
  $('files-panel').hidden = true;
  if (!thread) {
    messages.append(el('p', { class: 'empty', text: 'Create or pick a thread, then ask something. Attach files with the button or by dropping them here.' }));
    return;
  }
  if (!thread.messages.length)
    messages.append(el('p', { class: 'empty', text: 'No messages yet. Ask something, or attach a file first.' }));
  for (const message of thread.messages) messages.append(MessageView.fromStored(message, thread.id).node);
  messages.scrollTop = messages.scrollHeight;
  loadFiles();
}

// The thread's files panel: uploads and outputs, with sizes, previews and downloads
// (as the organisation's download settings allow).
async function loadFiles() {
  const thread = state.current;
  if (!thread) return;
  try {
    const files = (await api.listFiles(thread.id)).data;
    if (!state.current || state.current.id !== thread.id) return;
    $('files-panel').hidden = files.length === 0;
    $('file-count').textContent = String(files.length);
    const list = $('file-list');
    list.replaceChildren();
    for (const kind of ['upload', 'output']) {
      const mine = files.filter((f) => f.kind === kind);
      if (!mine.length) continue;
      list.append(el('h3', { class: 'file-group', text: kind === 'upload' ? `Uploaded (${mine.length})` : `Made by the assistant (${mine.length})` }));
      for (const file of mine) {
        const item = el('li', { 'data-kind': kind }, artifactCard(thread.id, file, { previewNow: false }));
        list.append(item);
      }
    }
  } catch (e) {
    handleError(e);
  }
}

function startRename() {
  const thread = state.current;
  if (!thread) return;
  const input = $('title-input');
  input.value = thread.title || '';
  $('thread-title').hidden = true;
  $('rename-form').hidden = false;
  input.focus();
  input.select();
}

function endRename() {
  $('rename-form').hidden = true;
  $('thread-title').hidden = false;
  $('rename-thread').focus();
}

async function saveRename() {
  const thread = state.current;
  const title = $('title-input').value.trim();
  try {
    const renamed = await api.renameThread(thread.id, title);
    thread.title = renamed.title;
    const item = state.threads.find((t) => t.id === thread.id);
    if (item) item.title = renamed.title;
    renderThreadList();
    $('thread-title').textContent = renamed.title || 'New thread';
    document.title = `${renamed.title || 'New thread'} · sandboxd Workspace`;
    endRename();
  } catch (e) {
    handleError(e);
  }
}

function askDelete() {
  const thread = state.current;
  if (!thread) return;
  $('delete-name').textContent = thread.title || 'New thread';
  $('delete-dialog').returnValue = '';
  $('delete-dialog').showModal();
}

async function deleteThread() {
  const thread = state.current;
  try {
    await api.deleteThread(thread.id);
    state.threads = state.threads.filter((t) => t.id !== thread.id);
    closeThread();
    setUrl(null);
    $('new-thread').focus();
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
  answer.node.setAttribute('aria-busy', 'true');
  messages.append(answer.node);
  messages.scrollTop = messages.scrollHeight;
  setStatus('Thinking…');
  const body = { content };
  if ($('code-toggle').checked && !$('code-toggle').disabled) body.pgpt = { tools: ['code_execution'] };
  const turn = { controller: new AbortController(), stopped: false, threadId: thread.id };
  state.turn = turn;
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
      } else if (name === 'execution_output') {
        answer.output(data);
      } else if (name === 'message_delta' && data.delta && data.delta.stopped) {
        turn.stopped = true;
      } else if (name === 'error') {
        failed = new api.ApiError(0, data.error.type, data.error.message);
      }
      messages.scrollTop = messages.scrollHeight;
    }, turn.controller.signal);
    $('prompt').value = '';
  } catch (e) {
    if (e.name === 'AbortError' && turn.stopped) $('prompt').value = '';
    else failed = e;
  }
  state.turn = null;
  answer.node.classList.remove('streaming');
  answer.node.removeAttribute('aria-busy');
  setBusy(false);
  setStatus(turn.stopped ? 'Stopped.' : '');
  if (failed && turn.stopped) {
    // Stopped before the answer began: nothing was stored, the text stays to send again.
    user.node.classList.add('unsent');
    answer.node.remove();
    setStatus('Stopped before the answer began: the message was not sent.');
    return;
  }
  if (failed) {
    user.node.classList.add('unsent');
    answer.node.remove();
    showBanner(`The message was not answered: ${describe(failed)}`);
    return;
  }
  if (turn.stopped) answer.markStopped();
  answer.node.setAttribute('data-complete', 'true');
  // The title, the stored answer and the files come from the server.
  try {
    const fresh = await api.getThread(thread.id);
    if (state.current && state.current.id === fresh.id) {
      state.current = fresh;
      $('thread-title').textContent = fresh.title || 'New thread';
      document.title = `${fresh.title || 'New thread'} · sandboxd Workspace`;
    }
    const item = state.threads.find((t) => t.id === fresh.id);
    if (item) item.title = fresh.title;
    renderThreadList();
    loadFiles();
  } catch (e) {
    handleError(e);
  }
  $('prompt').focus();
}

// Stops the running turn: the server is asked to stop it (it kills the command and
// stores what was said so far, then ends the stream), and the stream is closed
// whether or not that request got through.
async function stop() {
  const turn = state.turn;
  if (!turn || turn.stopped) return;
  turn.stopped = true;
  setStatus('Stopping…');
  $('stop').disabled = true;
  try {
    await api.stopTurn(turn.threadId);
  } catch (e) {
    showBanner(`The server was not told to stop (${describe(e)}); the answer's stream is closed instead.`);
  }
  turn.controller.abort();
}

function setBusy(busy) {
  state.busy = busy;
  for (const id of ['prompt', 'send', 'attach', 'delete-thread']) $(id).disabled = busy || !state.current;
  $('stop').hidden = !busy;
  $('stop').disabled = !busy;
  $('send').hidden = busy;
  if (busy) $('stop').focus();
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
      loadFiles();
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
  $('thread-search').addEventListener('input', onSearch);
  $('rename-thread').addEventListener('click', startRename);
  $('rename-form').addEventListener('submit', (event) => { event.preventDefault(); saveRename(); });
  $('rename-cancel').addEventListener('click', endRename);
  $('title-input').addEventListener('keydown', (event) => { if (event.key === 'Escape') { event.preventDefault(); endRename(); } });
  $('delete-thread').addEventListener('click', askDelete);
  $('delete-cancel').addEventListener('click', () => $('delete-dialog').close('cancel'));
  $('delete-confirm').addEventListener('click', () => $('delete-dialog').close('delete'));
  $('delete-dialog').addEventListener('close', () => {
    if ($('delete-dialog').returnValue === 'delete') deleteThread();
    else $('delete-thread').focus();
  });
  $('banner-close').addEventListener('click', hideBanner);
  $('toggle-sidebar').addEventListener('click', () => setSidebar($('sidebar').classList.contains('closed')));
  $('composer').addEventListener('submit', (event) => { event.preventDefault(); send(); });
  $('stop').addEventListener('click', stop);
  $('prompt').addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  document.addEventListener('keydown', (event) => {
    if (event.key === 'Escape' && !event.defaultPrevented && state.turn && !$('delete-dialog').open) stop();
  });
  window.addEventListener('popstate', () => { if (api.token() && !$('app').hidden) followUrl(); });
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
