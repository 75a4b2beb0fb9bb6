#!/usr/bin/env node
// A verifying reverse proxy in front of s3rver (which checks the access key id but not
// the signature): every request's AWS Signature V4 is recomputed with the AWS SDK's own
// signer (@smithy/signature-v4, pinned in package-lock.json) from what arrived on the
// wire, the way S3 does, and a request whose signature does not match is answered as S3
// answers it (403 SignatureDoesNotMatch, S3's XML error shape, with the canonical request
// and the string to sign); the others are forwarded to s3rver, bodies streamed both ways.
//
// What it checks, as S3 does:
// - Authorization: AWS4-HMAC-SHA256, a known access key id, the credential scope
//   (date of X-Amz-Date, the configured region, s3, aws4_request);
// - X-Amz-Date present, well-formed, within 15 minutes of now;
// - x-amz-content-sha256 present: UNSIGNED-PAYLOAD, or the hex SHA-256 of the body, which
//   is then checked against the body too (400 XAmzContentSHA256Mismatch);
// - host, x-amz-date, x-amz-content-sha256 and every other x-amz-* header are signed;
// - a PUT with a body has a Content-Length (no plain chunked uploads);
// - the canonical request is rebuilt from the decoded path (each segment re-encoded per
//   SigV4) and the decoded query parameters (re-encoded and sorted by the signer), so a
//   client that signs a non-canonical form of what it sends is refused.
//
// Usage: node sigv4_verifier.js --listen PORT --upstream PORT --region REGION
//                               --credentials ACCESS_KEY:SECRET [--credentials ...]
// One line per request on stdout: "verified METHOD URL" or "refused CODE METHOD URL".
'use strict';

const http = require('http');
const crypto = require('crypto');
const { pipeline } = require('stream');
const { SignatureV4 } = require('@smithy/signature-v4');
const { HttpRequest, escapeUri } = require('@smithy/core/protocols');

const args = { credentials: new Map() };
for (let i = 2; i < process.argv.length; i += 2) {
  const [name, value] = [process.argv[i], process.argv[i + 1]];
  if (name === '--credentials') {
    const colon = value.indexOf(':');
    args.credentials.set(value.slice(0, colon), value.slice(colon + 1));
  } else {
    args[name.replace(/^--/, '')] = value;
  }
}
if (!args.listen || !args.upstream || !args.region || args.credentials.size === 0) {
  console.error('usage: sigv4_verifier.js --listen PORT --upstream PORT --region REGION --credentials KEY:SECRET');
  process.exit(2);
}

const MAX_SKEW_MS = 15 * 60 * 1000;
const MAX_HASHED_BODY = 64 << 20;  // bodies that claim a hash are held until it is checked

// The SHA-256 (and HMAC-SHA-256 with a secret) the signer asks for, from node's crypto.
class Sha256 {
  constructor(secret) {
    this.hash = secret === undefined ? crypto.createHash('sha256') : crypto.createHmac('sha256', secret);
  }
  update(data) { this.hash.update(data); }
  digest() { return Promise.resolve(new Uint8Array(this.hash.digest())); }
}

class Refusal extends Error {
  constructor(status, code, message, extra = {}) {
    super(message);
    Object.assign(this, { status, code, extra });
  }
}

const xmlEscape = (text) => String(text).replace(/[<>&'"]/g, (c) => `&#${c.charCodeAt(0)};`);

function sendError(res, refusal, resource) {
  let body = `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${refusal.code}</Code>` +
             `<Message>${xmlEscape(refusal.message)}</Message>`;
  for (const [name, value] of Object.entries(refusal.extra)) body += `<${name}>${xmlEscape(value)}</${name}>`;
  body += `<Resource>${xmlEscape(resource)}</Resource><RequestId>sigv4-verifier</RequestId></Error>`;
  res.writeHead(refusal.status, { 'Content-Type': 'application/xml', 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}

// "AWS4-HMAC-SHA256 Credential=AK/20240101/us-east-1/s3/aws4_request, SignedHeaders=a;b, Signature=hex"
function parseAuthorization(header) {
  const malformed = (why) => new Refusal(400, 'AuthorizationHeaderMalformed', `The authorization header is malformed; ${why}`);
  const space = header.indexOf(' ');
  const algorithm = space < 0 ? header : header.slice(0, space);
  if (algorithm !== 'AWS4-HMAC-SHA256') throw malformed(`the algorithm '${algorithm}' is not AWS4-HMAC-SHA256`);
  const fields = {};
  for (const part of header.slice(space + 1).split(',')) {
    const eq = part.indexOf('=');
    if (eq > 0) fields[part.slice(0, eq).trim()] = part.slice(eq + 1).trim();
  }
  if (!fields.Credential || !fields.SignedHeaders || !fields.Signature)
    throw malformed('Credential, SignedHeaders and Signature are required');
  const scope = fields.Credential.split('/');
  if (scope.length < 5) throw malformed(`the credential '${fields.Credential}' is not KEY/DATE/REGION/SERVICE/aws4_request`);
  const [date, region, service, terminal] = scope.slice(-4);
  return {
    accessKeyId: scope.slice(0, -4).join('/'),
    date, region, service, terminal,
    signedHeaders: fields.SignedHeaders.split(';'),
    signature: fields.Signature,
  };
}

// 20240102T030405Z -> Date, or null.
function parseAmzDate(text) {
  const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(text || '');
  if (!m) return null;
  const date = new Date(Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +m[6]));
  return isNaN(date.getTime()) ? null : date;
}

function decode(text, what) {
  try {
    return decodeURIComponent(text);
  } catch {
    throw new Refusal(400, 'InvalidURI', `Couldn't parse the specified URI: the ${what} is not valid percent-encoded UTF-8`);
  }
}

// The path as S3 sees it (each segment decoded) in SigV4's canonical encoding.
function canonicalPath(rawPath) {
  return rawPath.split('/').map((segment) => escapeUri(decode(segment, 'path'))).join('/');
}

// The decoded query parameters; the signer encodes and sorts them.
function parseQuery(rawQuery) {
  const query = {};
  if (!rawQuery) return query;
  for (const pair of rawQuery.split('&')) {
    if (pair === '') continue;
    const eq = pair.indexOf('=');
    const name = decode(eq < 0 ? pair : pair.slice(0, eq), 'query');
    const value = eq < 0 ? '' : decode(pair.slice(eq + 1), 'query');
    if (!(name in query)) query[name] = value;
    else query[name] = [].concat(query[name], value);
  }
  return query;
}

// Every header of the request by lowercase name, repeated ones joined with ',' (SigV4).
function headerValues(rawHeaders) {
  const headers = {};
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i].toLowerCase();
    headers[name] = name in headers ? `${headers[name]},${rawHeaders[i + 1]}` : rawHeaders[i + 1];
  }
  return headers;
}

// Throws a Refusal unless the request is signed as S3 requires. Returns the payload
// hash the client claims (hex or UNSIGNED-PAYLOAD).
async function verify(req) {
  const headers = headerValues(req.rawHeaders);
  const question = req.url.indexOf('?');
  const rawPath = question < 0 ? req.url : req.url.slice(0, question);
  const rawQuery = question < 0 ? '' : req.url.slice(question + 1);
  const query = parseQuery(rawQuery);

  if (!headers.authorization) {
    if ('X-Amz-Signature' in query) throw new Refusal(501, 'NotImplemented', 'presigned URLs are not checked by this verifier');
    throw new Refusal(403, 'AccessDenied', 'Access Denied (the request is not signed)');
  }
  const auth = parseAuthorization(headers.authorization);
  const secret = args.credentials.get(auth.accessKeyId);
  if (secret === undefined)
    throw new Refusal(403, 'InvalidAccessKeyId', 'The AWS Access Key Id you provided does not exist in our records.',
                      { AWSAccessKeyId: auth.accessKeyId });
  const signingDate = parseAmzDate(headers['x-amz-date']);
  if (!signingDate) throw new Refusal(403, 'AccessDenied', 'AWS authentication requires a valid X-Amz-Date header');
  if (Math.abs(Date.now() - signingDate.getTime()) > MAX_SKEW_MS)
    throw new Refusal(403, 'RequestTimeTooSkewed', 'The difference between the request time and the current time is too large.');
  if (auth.date !== headers['x-amz-date'].slice(0, 8))
    throw new Refusal(400, 'AuthorizationHeaderMalformed', `The authorization header is malformed; the credential date '${auth.date}' is not the date of X-Amz-Date`);
  if (auth.region !== args.region)
    throw new Refusal(400, 'AuthorizationHeaderMalformed', `The authorization header is malformed; the region '${auth.region}' is wrong; expecting '${args.region}'`, { Region: args.region });
  if (auth.service !== 's3' || auth.terminal !== 'aws4_request')
    throw new Refusal(400, 'AuthorizationHeaderMalformed', `The authorization header is malformed; the scope must end in s3/aws4_request`);

  const payloadHash = headers['x-amz-content-sha256'];
  if (payloadHash === undefined)
    throw new Refusal(400, 'InvalidRequest', 'Missing required header for this request: x-amz-content-sha256');
  if (payloadHash.startsWith('STREAMING-'))
    throw new Refusal(501, 'NotImplemented', `this verifier does not check ${payloadHash} (aws-chunked) bodies`);
  if (payloadHash !== 'UNSIGNED-PAYLOAD' && !/^[0-9a-f]{64}$/.test(payloadHash))
    throw new Refusal(400, 'InvalidArgument', 'x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD, or a valid sha256 value.');

  const signed = new Set(auth.signedHeaders);
  const unsigned = Object.keys(headers).filter((name) =>
    (name === 'host' || name.startsWith('x-amz-')) && !signed.has(name));
  if (unsigned.length)
    throw new Refusal(403, 'AccessDenied', 'There were headers present in the request which were not signed',
                      { HeadersNotSigned: unsigned.join(', ') });
  const absent = auth.signedHeaders.filter((name) => !(name in headers));
  if (absent.length)
    throw new Refusal(403, 'AccessDenied', `signed headers are not in the request: ${absent.join(', ')}`);

  // Only the headers the client signed go to the signer (forced signable, even those it
  // would leave out by default), so its SignedHeaders must come out the same.
  const toSign = {};
  for (const name of auth.signedHeaders) toSign[name] = headers[name];
  const request = new HttpRequest({
    method: req.method,
    protocol: 'http:',
    hostname: (headers.host || '').replace(/:\d+$/, ''),
    path: canonicalPath(rawPath),
    query,
    headers: toSign,
  });
  const signer = new SignatureV4({
    credentials: { accessKeyId: auth.accessKeyId, secretAccessKey: secret },
    region: args.region,
    service: 's3',
    sha256: Sha256,
    uriEscapePath: false,  // S3: the path is the (already canonical) key path, not encoded twice
    applyChecksum: false,
  });
  const expected = await signer.sign(request, { signingDate, signableHeaders: signed });
  const expectedAuth = parseAuthorization(expected.headers.authorization);
  const expectedSignedHeaders = expectedAuth.signedHeaders.join(';');
  if (expectedAuth.signature !== auth.signature || expectedSignedHeaders !== auth.signedHeaders.join(';')) {
    const canonicalHeaders = {};
    for (const name of expectedAuth.signedHeaders)
      canonicalHeaders[name] = expected.headers[name].replace(/[\r\n]/g, ' ').replace(/[ \t]+/g, ' ').trim();
    const canonicalRequest = signer.createCanonicalRequest(expected, canonicalHeaders, payloadHash);
    const scope = `${auth.date}/${args.region}/s3/aws4_request`;
    const stringToSign = await signer.createStringToSign(headers['x-amz-date'], scope, canonicalRequest, 'AWS4-HMAC-SHA256');
    throw new Refusal(403, 'SignatureDoesNotMatch',
                      'The request signature we calculated does not match the signature you provided. Check your key and signing method.',
                      { AWSAccessKeyId: auth.accessKeyId, SignatureProvided: auth.signature,
                        SignedHeadersProvided: auth.signedHeaders.join(';'), SignedHeadersExpected: expectedSignedHeaders,
                        StringToSign: stringToSign, CanonicalRequest: canonicalRequest });
  }
  return payloadHash;
}

// The whole body (for a claimed hash), or a Refusal when it is too big.
function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', (chunk) => {
      size += chunk.length;
      if (size > MAX_HASHED_BODY) {
        req.pause();
        reject(new Refusal(400, 'EntityTooLarge', `this verifier checks hashed bodies up to ${MAX_HASHED_BODY} bytes`));
      } else {
        chunks.push(chunk);
      }
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

const agent = new http.Agent({ keepAlive: true });

function forward(req, res, bufferedBody) {
  const upstream = http.request({
    host: '127.0.0.1', port: Number(args.upstream), method: req.method, path: req.url, headers: req.headers, agent,
  }, (answer) => {
    res.writeHead(answer.statusCode, answer.headers);
    pipeline(answer, res, () => {});
  });
  upstream.on('error', () => {
    if (!res.headersSent) sendError(res, new Refusal(503, 'ServiceUnavailable', 'the S3 server behind the verifier does not answer'), req.url);
    else res.destroy();
  });
  if (bufferedBody) upstream.end(bufferedBody);
  else pipeline(req, upstream, () => {});  // a cut client body cuts the upstream request too
}

const server = http.createServer(async (req, res) => {
  try {
    const payloadHash = await verify(req);
    if (req.method === 'PUT' && req.headers['content-length'] === undefined && req.headers['transfer-encoding'] !== undefined)
      throw new Refusal(411, 'MissingContentLength', 'You must provide the Content-Length HTTP header.');
    let body = null;
    if (payloadHash !== 'UNSIGNED-PAYLOAD') {
      body = await readBody(req);
      const computed = crypto.createHash('sha256').update(body).digest('hex');
      if (computed !== payloadHash)
        throw new Refusal(400, 'XAmzContentSHA256Mismatch', "The provided 'x-amz-content-sha256' header does not match what was computed.",
                          { ClientComputedContentSHA256: payloadHash, S3ComputedContentSHA256: computed });
    }
    console.log(`verified ${req.method} ${req.url}`);
    forward(req, res, body);
  } catch (error) {
    const refusal = error instanceof Refusal ? error : new Refusal(500, 'InternalError', String(error && error.stack || error));
    console.log(`refused ${refusal.code} ${req.method} ${req.url}${refusal.extra.CanonicalRequest ? `\n--- canonical request:\n${refusal.extra.CanonicalRequest}\n---` : ''}`);
    // The unread body is drained (the connection stays usable), then the error goes.
    req.resume();
    sendError(res, refusal, req.url);
  }
});
server.keepAliveTimeout = 60 * 1000;
server.listen(Number(args.listen), '127.0.0.1');
process.on('SIGTERM', () => process.exit(0));
