// Client compatibility: the official Anthropic TypeScript SDK, unmodified, against a
// real `sandboxd serve` whose upstream is the scripted model server (tests/
// scripted_upstream.h). Run by CTest with SANDBOXD_PATH and SCRIPTED_UPSTREAM_PATH.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Stack, message, text, toolUse } from '../harness.mjs';
import Anthropic from '@anthropic-ai/sdk';

const TOKEN = 'sdk-secret-token';
const stack = new Stack(TOKEN, 'sdk', 'sandboxd-sdk-');
const script = (steps) => stack.script(steps);
const upstreamRequests = () => stack.upstreamRequests();

before(() => stack.start());
after(() => stack.stop());

// The SDK appends /v1/messages to its base URL.
const client = () => new Anthropic({ apiKey: TOKEN, baseURL: `${stack.serverUrl}/api/gpt`, maxRetries: 0 });

test('messages.create runs code in the container', async () => {
  await script([
    message([text('Computing.'), toolUse('toolu_sdk1', 'bash_code_execution', { command: 'echo $((2+3))' })], 'tool_use'),
    message([text('It is 5.')], 'end_turn'),
  ]);
  const reply = await client().messages.create({
    model: 'default',
    max_tokens: 1024,
    container: 'sdk-container',
    messages: [{ role: 'user', content: 'What is 2+3? Run code.' }],
    tools: [{ name: 'code_execution', type: 'code_execution_v1' }],
  });
  assert.match(reply.id, /^msg_/);
  assert.equal(reply.stop_reason, 'end_turn');
  assert.deepEqual(reply.content.map((b) => b.type),
                   ['text', 'server_tool_use', 'bash_code_execution_tool_result', 'text']);
  assert.equal(reply.content[1].id, 'srvtoolu_sdk1');
  assert.deepEqual(reply.content[2].content, {
    type: 'bash_code_execution_result', stdout: '5\n', stderr: '', return_code: 0,
  });
  assert.equal(reply.container.id, 'sdk-container');
  assert.equal(reply.usage.server_tool_use.code_execution_requests, 1);
  assert.equal(reply.usage.input_tokens, 22);
  const sent = await upstreamRequests();
  assert.equal(sent.length, 2);
  assert.equal(sent[0].model, 'upstream-model');
});

test('beta.messages.create with betas and the Anthropic tool version', async () => {
  await script([
    message([toolUse('toolu_sdk2', 'text_editor_code_execution', { command: 'view', path: 'absent.txt' })], 'tool_use'),
    message([text('No such file.')], 'end_turn'),
  ]);
  const reply = await client().beta.messages.create({
    model: 'default',
    max_tokens: 1024,
    container: 'sdk-container',
    betas: ['code-execution-2025-08-25'],
    messages: [{ role: 'user', content: 'Show absent.txt' }],
    tools: [{ name: 'code_execution', type: 'code_execution_20250825' }],
  });
  assert.equal(reply.stop_reason, 'end_turn');
  const result = reply.content[1];
  assert.equal(result.type, 'text_editor_code_execution_tool_result');
  assert.equal(result.content.type, 'text_editor_code_execution_tool_result_error');
  assert.equal(result.content.error_code, 'unavailable');
  assert.equal(result.content.detail, undefined, 'the Anthropic shape has no detail');
});

test('messages.stream().finalMessage() reassembles the turn', async () => {
  await script([
    message([text('Writing the file.'),
             toolUse('toolu_sdk3', 'bash_code_execution', { command: 'echo streamed | tee /mnt/user-data/outputs/s.txt' })],
            'tool_use'),
    message([text('Saved to outputs.')], 'end_turn'),
  ]);
  const stream = client().messages.stream({
    model: 'default',
    max_tokens: 1024,
    container: 'sdk-container',
    messages: [{ role: 'user', content: 'Save a file' }],
    tools: [{ name: 'code_execution', type: 'code_execution_v1' }],
  });
  let textSeen = '';
  stream.on('text', (delta) => { textSeen += delta; });
  const final = await stream.finalMessage();
  assert.equal(final.stop_reason, 'end_turn');
  assert.deepEqual(final.content.map((b) => b.type),
                   ['text', 'server_tool_use', 'bash_code_execution_tool_result', 'text']);
  assert.deepEqual(final.content[1].input, { command: 'echo streamed | tee /mnt/user-data/outputs/s.txt' });
  assert.equal(final.content[2].content.stdout, 'streamed\n');
  assert.equal(final.content[3].text, 'Saved to outputs.');
  assert.equal(textSeen, 'Writing the file.Saved to outputs.');
  assert.equal(final.container.id, 'sdk-container');
  assert.equal(final.usage.server_tool_use.code_execution_requests, 1);
});

test('a bad key is an AuthenticationError', async () => {
  const bad = new Anthropic({ apiKey: 'not-a-token', baseURL: `${stack.serverUrl}/api/gpt`, maxRetries: 0 });
  await assert.rejects(
    bad.messages.create({ model: 'default', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] }),
    (error) => error instanceof Anthropic.AuthenticationError && error.status === 401,
  );
});

test('an invalid request is a BadRequestError with the field in its message', async () => {
  await assert.rejects(
    client().messages.create({ model: 'default', max_tokens: 0, messages: [{ role: 'user', content: 'hi' }] }),
    (error) => error instanceof Anthropic.BadRequestError && /max_tokens/.test(error.message),
  );
});
