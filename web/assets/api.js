// The Workspace API as the page uses it: every call carries the token, every failure
// becomes an ApiError with the server's message (and, for 429/503, the wait).

const TOKEN_KEY = 'sandboxd.token';

export function token() { return sessionStorage.getItem(TOKEN_KEY); }
export function setToken(value) { sessionStorage.setItem(TOKEN_KEY, value); }
export function clearToken() { sessionStorage.removeItem(TOKEN_KEY); }

export class ApiError extends Error {
  constructor(status, type, message, retryAfter) {
    super(message);
    this.status = status;
    this.type = type;
    this.retryAfter = retryAfter;
  }
  describe() {
    let text = this.message;
    if ((this.status === 429 || this.status === 503) && this.retryAfter)
      text += ` Try again in ${this.retryAfter} s.`;
    return this.status ? `${text} (HTTP ${this.status})` : text;
  }
}

function headers(extra = {}) {
  return { Authorization: `Bearer ${token()}`, ...extra };
}

export async function errorFrom(response) {
  let type = 'api_error';
  let message = `The server answered HTTP ${response.status}`;
  try {
    const body = await response.json();
    if (body && body.error) {
      type = body.error.type || type;
      message = body.error.message || message;
    }
  } catch { /* not JSON: keep the status line */ }
  return new ApiError(response.status, type, message, response.headers.get('Retry-After'));
}

export async function call(method, path, body) {
  let response;
  try {
    response = await fetch(path, {
      method,
      headers: headers(body === undefined ? {} : { 'Content-Type': 'application/json' }),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiError(0, 'network_error', `The server cannot be reached: ${e.message}`);
  }
  if (!response.ok) throw await errorFrom(response);
  return response.json();
}

const threadPath = (id) => `/api/v1/app/thread/${encodeURIComponent(id)}`;

export const features = () => call('GET', '/api/v1/app/features');
// Newest first; `query` keeps the threads whose title holds it.
export const listThreads = (afterId, query) =>
  call('GET', `/api/v1/app/thread?limit=50${afterId ? `&after_id=${encodeURIComponent(afterId)}` : ''}` +
    `${query ? `&q=${encodeURIComponent(query)}` : ''}`);
export const createThread = (title) => call('POST', '/api/v1/app/thread', title ? { title } : {});
export const getThread = (id) => call('GET', threadPath(id));
export const renameThread = (id, title) => call('PATCH', threadPath(id), { title });
export const deleteThread = (id) => call('DELETE', threadPath(id));
export const listArtifacts = (id) => call('GET', `${threadPath(id)}/artifacts`);
export const listFiles = (id) => call('GET', `${threadPath(id)}/files`);
export const stopTurn = (id) => call('POST', `${threadPath(id)}/stop`);

// Posts a message and reads the answer's server-sent events as they arrive:
// onEvent(name, data) for each. Aborting `signal` closes the stream (the server then
// stops the turn); the promise then rejects with an AbortError.
export async function sendMessage(id, body, onEvent, signal) {
  let response;
  try {
    response = await fetch(`${threadPath(id)}/messages`, {
      method: 'POST',
      headers: headers({ 'Content-Type': 'application/json', Accept: 'text/event-stream' }),
      body: JSON.stringify({ ...body, stream: true }),
      signal,
    });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, 'network_error', `The server cannot be reached: ${e.message}`);
  }
  if (!response.ok) throw await errorFrom(response);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let name = 'message';
      const data = [];
      for (const line of block.split('\n')) {
        if (line.startsWith('event:')) name = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).trimStart());
      }
      if (data.length) onEvent(name, JSON.parse(data.join('\n')));
    }
  }
}

// Uploads one file with progress (XMLHttpRequest: fetch reports no upload progress).
export function uploadFile(id, file, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open('POST', `${threadPath(id)}/upload-file`);
    xhr.setRequestHeader('Authorization', `Bearer ${token()}`);
    xhr.upload.onprogress = (e) => { if (e.lengthComputable) onProgress(e.loaded / e.total); };
    xhr.onerror = () => reject(new ApiError(0, 'network_error', 'The upload failed: the connection was lost'));
    xhr.onload = () => {
      let body = null;
      try { body = JSON.parse(xhr.responseText); } catch { /* below */ }
      if (xhr.status >= 200 && xhr.status < 300) return resolve(body);
      const error = body && body.error ? body.error : {};
      reject(new ApiError(xhr.status, error.type || 'api_error', error.message || `HTTP ${xhr.status}`,
        xhr.getResponseHeader('Retry-After')));
    };
    const form = new FormData();
    form.append('file', file, file.name);
    xhr.send(form);
  });
}

// A file's bytes with the token (a plain link could not send it).
export async function download(url) {
  let response;
  try {
    response = await fetch(url, { headers: headers() });
  } catch (e) {
    throw new ApiError(0, 'network_error', `The server cannot be reached: ${e.message}`);
  }
  if (!response.ok) throw await errorFrom(response);
  return response.blob();
}
