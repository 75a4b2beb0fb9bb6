// Markdown as the model writes it, turned into elements: marked parses it (GitHub
// flavour: tables, lists, links, fenced code; HTML in it shows as text), DOMPurify
// keeps only the plain document
// tags of a short allow-list (no script, no event handler, no style, no image, no frame,
// no form: nothing the model says can run code or load anything), and highlight.js
// colours the code blocks. The libraries are served from this origin (assets/vendor/,
// built from web/package-lock.json by scripts/web-vendor.sh).
import { Marked } from './vendor/marked.esm.js';
import DOMPurify from './vendor/purify.es.mjs';
import hljs from './vendor/highlight.min.js';

const escapeHtml = (text) => String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

const marked = new Marked({
  gfm: true,
  breaks: false,
  renderer: {
    // An image in the model's text would be a request to wherever it points: it is
    // shown as its description instead (the files a turn makes come as artifacts).
    image({ text, href }) {
      return `<span class="md-image">[image: ${escapeHtml(text || href || '')}]</span>`;
    },
    checkbox({ checked }) { return checked ? '☑ ' : '☐ '; },
    // HTML the model writes is shown as the text it is, not rendered: the answer's
    // formatting is markdown's. (DOMPurify below still checks what marked makes.)
    html({ text }) { return escapeHtml(text); },
  },
});

const ALLOWED_TAGS = ['a', 'p', 'br', 'hr', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'strong', 'b', 'em', 'i', 'del', 's',
  'code', 'pre', 'blockquote', 'ul', 'ol', 'li', 'table', 'thead', 'tbody', 'tr', 'th', 'td', 'sup', 'sub', 'kbd',
  'span', 'div', 'details', 'summary'];
const ALLOWED_ATTR = ['href', 'title', 'align', 'start', 'colspan', 'rowspan', 'class'];
const PURIFY = {
  ALLOWED_TAGS, ALLOWED_ATTR, ALLOW_DATA_ATTR: false, ALLOW_ARIA_ATTR: false,
  // Links leave the page only when a person follows them, and only to the web or mail.
  ALLOWED_URI_REGEXP: /^(?:https?:|mailto:)/i,
  RETURN_DOM_FRAGMENT: true,
};
// The code's language (from marked) and highlight.js's token classes are the only
// classes kept: a class of the page's own would let a message dress up as the page.
const KEPT_CLASS = /^(?:language-[\w+#.-]{1,40}|hljs(?:-[\w-]{1,40})?|md-image)$/;

DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.hasAttribute && node.hasAttribute('class')) {
    const kept = [...node.classList].filter((c) => KEPT_CLASS.test(c));
    if (kept.length) node.setAttribute('class', kept.join(' '));
    else node.removeAttribute('class');
  }
  if (node.tagName === 'A' && node.hasAttribute('href')) {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer nofollow');
  }
});

// Safe markup (DOMPurify's) for a piece of markdown.
export function markdownFragment(text) {
  return DOMPurify.sanitize(marked.parse(text || '', { async: false }), PURIFY);
}

// highlight.js's output for `code` (escaped text in spans), passed through DOMPurify too.
export function highlightInto(codeElement, code, language) {
  let html;
  if (language && hljs.getLanguage(language)) {
    html = hljs.highlight(code, { language, ignoreIllegals: true }).value;
  } else if (!language && code.length <= 20000) {
    html = hljs.highlightAuto(code).value;
  } else {
    codeElement.textContent = code;
    return;
  }
  codeElement.replaceChildren(DOMPurify.sanitize(html, { ALLOWED_TAGS: ['span'], ALLOWED_ATTR: ['class'], RETURN_DOM_FRAGMENT: true }));
  codeElement.classList.add('hljs');
}

export const languageOf = (name) => hljs.getLanguage(name) ? name : null;

// Copies `text`: the asynchronous clipboard where the page is a secure context
// (https, loopback), a selected textarea elsewhere (plain http on a LAN address).
export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
    return;
  }
  const area = document.createElement('textarea');
  area.value = text;
  area.setAttribute('readonly', '');
  area.className = 'visually-hidden';
  document.body.append(area);
  area.select();
  const ok = document.execCommand('copy');
  area.remove();
  if (!ok) throw new Error('the browser refused to copy');
}

// A code block with its language, highlighted, and a copy button.
export function codeBlock(code, language) {
  const pre = document.createElement('pre');
  pre.className = 'code';
  const codeElement = document.createElement('code');
  pre.append(codeElement);
  highlightInto(codeElement, code, language);
  if (language) pre.setAttribute('data-language', language);
  const head = document.createElement('div');
  head.className = 'code-head';
  const label = document.createElement('span');
  label.className = 'code-language';
  label.textContent = language || 'code';
  const button = document.createElement('button');
  button.type = 'button';
  button.className = 'copy';
  button.textContent = 'Copy';
  button.setAttribute('aria-label', `Copy the ${language || ''} code`.replace('  ', ' '));
  const said = document.createElement('span');
  said.className = 'visually-hidden';
  said.setAttribute('role', 'status');
  button.addEventListener('click', async () => {
    try {
      await copyText(code);
      button.textContent = 'Copied';
      said.textContent = 'Code copied to the clipboard';
    } catch (e) {
      button.textContent = 'Copy failed';
      said.textContent = `The code could not be copied: ${e.message}`;
    }
    setTimeout(() => { button.textContent = 'Copy'; said.textContent = ''; }, 2000);
  });
  head.append(label, button, said);
  const wrap = document.createElement('div');
  wrap.className = 'code-block';
  wrap.append(head, pre);
  return wrap;
}

// Renders markdown into `target`: the sanitised fragment, its code blocks highlighted
// with copy buttons, its tables scrollable.
export function renderMarkdown(target, text) {
  const fragment = markdownFragment(text);
  for (const code of [...fragment.querySelectorAll('pre > code')]) {
    const match = /(?:^|\s)language-([\w+#.-]+)/.exec(code.getAttribute('class') || '');
    const block = codeBlock(code.textContent.replace(/\n$/, ''), match ? match[1].toLowerCase() : null);
    code.parentElement.replaceWith(block);
  }
  for (const table of [...fragment.querySelectorAll('table')]) {
    const wrap = document.createElement('div');
    wrap.className = 'table-wrap';
    table.replaceWith(wrap);
    wrap.append(table);
  }
  target.replaceChildren(fragment);
}
