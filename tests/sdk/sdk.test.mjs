// Client compatibility: the official Anthropic TypeScript SDK, unmodified, against a
// real `sandboxd serve` whose upstream is the scripted model server (tests/
// scripted_upstream.h). Run by CTest with SANDBOXD_PATH and SCRIPTED_UPSTREAM_PATH.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Stack, message, text, toolUse } from '../harness.mjs';
import Anthropic, { toFile } from '@anthropic-ai/sdk';

const TOKEN = 'sdk-secret-token';
const stack = new Stack(TOKEN, 'sdk', 'sandboxd-sdk-');
const fileId = (path) => Buffer.from(path).toString('base64url');
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
  // Anthropic's BashCodeExecutionResultBlock: `content` lists output files ([] here).
  assert.deepEqual(reply.content[2].content, {
    type: 'bash_code_execution_result', stdout: '5\n', stderr: '', return_code: 0, content: [],
  });
  assert.deepEqual(reply.content[1].caller, { type: 'direct' });
  assert.equal(reply.container.skills, null);
  assert.equal(reply.stop_details, null);
  assert.equal(reply.usage.server_tool_use.web_search_requests, 0);
  assert.equal(reply.usage.server_tool_use.web_fetch_requests, 0);
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
  assert.deepEqual(final.content[2].content.content,
                   [{ type: 'bash_code_execution_output', file_id: fileId('/mnt/user-data/outputs/s.txt') }]);
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

test('a command\'s output files come back by Files API id, downloadable at once', async () => {
  await script([
    message([toolUse('toolu_sdk4', 'bash_code_execution', {
      command: 'mkdir -p /mnt/user-data/outputs/r && echo 1 > /mnt/user-data/outputs/r/a.txt && echo kept > /home/agent/workspace/w.txt',
    })], 'tool_use'),
    message([toolUse('toolu_sdk5', 'bash_code_execution', {
      command: 'cp -p /mnt/user-data/outputs/r/a.txt /mnt/user-data/outputs/b.txt; touch -d 2001-01-01 /mnt/user-data/outputs/b.txt',
    })], 'tool_use'),
    message([toolUse('toolu_sdk6', 'bash_code_execution', { command: 'cat /mnt/user-data/outputs/b.txt' })], 'tool_use'),
    message([text('Done.')], 'end_turn'),
  ]);
  const reply = await client().messages.create({
    model: 'default', max_tokens: 1024, container: 'sdk-outputs',
    messages: [{ role: 'user', content: 'Make files' }],
    tools: [{ name: 'code_execution', type: 'code_execution_v1' }],
  });
  const results = reply.content.filter((b) => b.type === 'bash_code_execution_tool_result').map((b) => b.content);
  assert.equal(results.length, 3);
  // Only outputs/ counts (not the workspace); a copy whose mtime is back-dated still counts.
  assert.deepEqual(results[0].content, [{ type: 'bash_code_execution_output', file_id: fileId('/mnt/user-data/outputs/r/a.txt') }]);
  assert.deepEqual(results[1].content, [{ type: 'bash_code_execution_output', file_id: fileId('/mnt/user-data/outputs/b.txt') }]);
  assert.deepEqual(results[2].content, [], 'a command that writes nothing lists nothing');
  const res = await fetch(`${stack.serverUrl}/api/gpt/v1/files/${results[1].content[0].file_id}/content?scope_id=sdk-outputs`,
                          { headers: { 'x-api-key': TOKEN } });
  assert.equal(await res.text(), '1\n');
});

for (const type of ['code_execution_20260120', 'code_execution_20260521']) {
  test(`the ${type} tool: Anthropic's shapes, errors without detail`, async () => {
    await script([
      message([toolUse('toolu_sdk7', 'text_editor_code_execution', { command: 'view', path: 'absent.txt' }),
               toolUse('toolu_sdk8', 'bash_code_execution', { command: 'echo hi' })], 'tool_use'),
      message([text('Seen.')], 'end_turn'),
    ]);
    const reply = await client().beta.messages.create({
      model: 'default', max_tokens: 1024, container: 'sdk-versions',
      messages: [{ role: 'user', content: 'Look' }],
      tools: [{ name: 'code_execution', type }],
    });
    const [editor, bash] = reply.content.filter((b) => b.type.endsWith('_tool_result')).map((b) => b.content);
    assert.deepEqual(editor, {
      type: 'text_editor_code_execution_tool_result_error', error_code: 'unavailable',
      error_message: 'File not found: /home/agent/workspace/absent.txt',
    });
    assert.deepEqual(bash, { type: 'bash_code_execution_result', stdout: 'hi\n', stderr: '', return_code: 0, content: [] });
    const valid = await fetch(`${stack.serverUrl}/api/gpt/v1/messages/validate`, {
      method: 'POST', headers: { 'x-api-key': TOKEN, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'default', max_tokens: 5, messages: [{ role: 'user', content: 'x' }], tools: [{ name: 'code_execution', type }] }),
    });
    assert.equal(valid.status, 200);
  });
}

test('a response sent back as history is accepted as it is (caller, content arrays, error_message)', async () => {
  await script([
    message([toolUse('toolu_sdk9', 'bash_code_execution', { command: 'echo one > /mnt/user-data/outputs/h.txt' }),
             toolUse('toolu_sdk10', 'text_editor_code_execution', { command: 'view', path: 'nope.txt' }),
             toolUse('toolu_client1', 'lookup', { q: 'x' })], 'tool_use'),
    message([text('All answered.')], 'end_turn'),
  ]);
  const params = {
    model: 'default', max_tokens: 1024, container: 'sdk-history',
    tools: [{ name: 'code_execution', type: 'code_execution_20250825' },
            { name: 'lookup', description: 'Looks up', input_schema: { type: 'object', properties: { q: { type: 'string' } } } }],
  };
  const question = { role: 'user', content: 'Go' };
  const first = await client().messages.create({ ...params, messages: [question] });
  assert.equal(first.stop_reason, 'tool_use');
  const clientCall = first.content.find((b) => b.type === 'tool_use');
  assert.deepEqual(clientCall.caller, { type: 'direct' });
  const second = await client().messages.create({
    ...params,
    messages: [question, { role: 'assistant', content: first.content },
               { role: 'user', content: [{ type: 'tool_result', tool_use_id: clientCall.id, content: 'found' }] }],
  });
  assert.equal(second.content.at(-1).text, 'All answered.');
  const [, sent] = await upstreamRequests();
  const blocks = sent.messages.flatMap((m) => m.content);
  const uses = blocks.filter((b) => b.type === 'tool_use');
  assert.deepEqual(uses.map((b) => b.name), ['bash_code_execution', 'text_editor_code_execution', 'lookup']);
  for (const use of uses) assert.equal(use.caller, undefined, 'the upstream never sees caller');
  const results = blocks.filter((b) => b.type === 'tool_result');
  assert.equal(results.length, 3);
  assert.match(results[1].content, /File not found/, 'error_message reaches the model');
  assert.equal(results[1].is_error, true);
});

test('container_upload: a file of another container is placed in this one\'s uploads', async () => {
  // Uploaded to container A with the SDK's Files API (scope_id as its query option).
  const uploaded = await client().beta.files.upload(
    { file: await toFile(Buffer.from('x,y\n3,4\n'), 'table.csv') }, { query: { scope_id: 'sdk-upload-a' } });
  assert.equal(uploaded.id, fileId('/mnt/user-data/uploads/table.csv'));
  await script([
    message([toolUse('toolu_sdk11', 'bash_code_execution', { command: 'cat /mnt/user-data/uploads/table.csv' })], 'tool_use'),
    message([text('Read it.')], 'end_turn'),
  ]);
  const reply = await client().messages.create({
    model: 'default', max_tokens: 1024, container: 'sdk-upload-b',
    messages: [{ role: 'user', content: [{ type: 'container_upload', file_id: uploaded.id }, { type: 'text', text: 'Read the table' }] }],
    tools: [{ name: 'code_execution', type: 'code_execution_20250825' }],
  });
  assert.equal(reply.content[1].content.stdout, 'x,y\n3,4\n');
  const [sent] = await upstreamRequests();
  assert.deepEqual(sent.messages[0].content[0], {
    type: 'text', text: '[container_upload: the file /mnt/user-data/uploads/table.csv is in the container for this turn]',
  });
  // A file already in the request's container is used where it is.
  await script([message([text('Fine.')], 'end_turn')]);
  await client().messages.create({
    model: 'default', max_tokens: 1024, container: 'sdk-outputs',
    messages: [{ role: 'user', content: [{ type: 'container_upload', file_id: fileId('/mnt/user-data/outputs/b.txt') }] }],
    tools: [{ name: 'code_execution', type: 'code_execution_20250825' }],
  });
  assert.match((await upstreamRequests())[0].messages[0].content[0].text, /the file \/mnt\/user-data\/outputs\/b\.txt is in/);
  // An id no container of this owner has is a NotFoundError naming the block.
  await assert.rejects(client().messages.create({
    model: 'default', max_tokens: 1024, container: 'sdk-upload-b',
    messages: [{ role: 'user', content: [{ type: 'container_upload', file_id: fileId('/mnt/user-data/uploads/none.csv') }] }],
    tools: [{ name: 'code_execution', type: 'code_execution_20250825' }],
  }), (e) => e instanceof Anthropic.NotFoundError && /messages\.0\.content\.0\.file_id/.test(e.message));
  // Without the code execution tool the block has nowhere to go.
  await assert.rejects(client().messages.create({
    model: 'default', max_tokens: 1024,
    messages: [{ role: 'user', content: [{ type: 'container_upload', file_id: uploaded.id }] }],
  }), (e) => e instanceof Anthropic.BadRequestError);
});

// The persistent Python (code_execution_20260120): the model's `code_execution` calls
// share one kernel, their results in Anthropic's code_execution_result shape.
test('the persistent Python: state kept from one call to the next, output files by id', async () => {
  await script([
    message([toolUse('toolu_py1', 'code_execution', { code: 'total = 40' })], 'tool_use'),
    message([toolUse('toolu_py2', 'code_execution',
                     { code: "open('/mnt/user-data/outputs/t.txt', 'w').write(str(total + 2))\ntotal + 2" })], 'tool_use'),
    message([text('42.')], 'end_turn'),
  ]);
  const stream = client().beta.messages.stream({
    model: 'default', max_tokens: 1024, container: 'sdk-python',
    messages: [{ role: 'user', content: 'Keep a total' }],
    tools: [{ name: 'code_execution', type: 'code_execution_20260120' }],
  });
  const reply = await stream.finalMessage();
  assert.deepEqual(reply.content.map((b) => b.type),
                   ['server_tool_use', 'code_execution_tool_result', 'server_tool_use', 'code_execution_tool_result', 'text']);
  assert.equal(reply.content[0].name, 'code_execution');
  assert.deepEqual(reply.content[3].content, {
    type: 'code_execution_result', stdout: '42\n', stderr: '', return_code: 0,
    content: [{ type: 'code_execution_output', file_id: fileId('/mnt/user-data/outputs/t.txt') }],
  });
});

// Programmatic tool calling as Anthropic's guide does it with the SDK: a tool that code
// may call, the code's calls answered by the client, the final output.
const priceTool = (version) => ({
  name: 'get_price', description: 'The price of an item, as a decimal string.',
  input_schema: { type: 'object', properties: { item: { type: 'string' } }, required: ['item'] },
  allowed_callers: [version],
});
const prices = { apple: '1.5', pear: '2' };

test('programmatic tool calling: code calls a client tool twice and uses the results', async () => {
  const code = "a = await get_price(item='apple')\nb = await get_price(item='pear')\nprint('sum', float(a) + float(b))";
  await script([
    message([toolUse('toolu_ptc1', 'code_execution', { code })], 'tool_use'),
    message([text('They cost 3.5 together.')], 'end_turn'),
  ]);
  const params = {
    model: 'default', max_tokens: 1024,
    tools: [{ name: 'code_execution', type: 'code_execution_20260120' }, priceTool('code_execution_20260120')],
  };
  const messages = [{ role: 'user', content: 'What do an apple and a pear cost?' }];
  let reply = await client().beta.messages.create({ ...params, container: 'sdk-ptc', messages });
  const calls = [];
  while (reply.stop_reason === 'tool_use') {
    const uses = reply.content.filter((b) => b.type === 'tool_use');
    for (const use of uses) {
      assert.deepEqual(use.caller, { type: 'code_execution_20260120', tool_id: 'srvtoolu_ptc1' });
      calls.push(use.input.item);
    }
    messages.push({ role: 'assistant', content: reply.content });
    messages.push({ role: 'user', content: uses.map((u) => ({ type: 'tool_result', tool_use_id: u.id, content: prices[u.input.item] })) });
    if (calls.length === 1) {
      // Without the container the pending calls cannot be answered: Anthropic's error.
      await assert.rejects(client().beta.messages.create({ ...params, messages }), (err) => {
        assert.ok(err instanceof Anthropic.BadRequestError);
        assert.match(err.message, /container_id is required when there are pending tool uses generated by code execution with tools\./);
        return true;
      });
    }
    reply = await client().beta.messages.create({ ...params, container: reply.container.id, messages });
  }
  assert.deepEqual(calls, ['apple', 'pear']);
  assert.equal(reply.stop_reason, 'end_turn');
  const result = reply.content.find((b) => b.type === 'code_execution_tool_result');
  assert.equal(result.tool_use_id, 'srvtoolu_ptc1');
  assert.equal(result.content.stdout, 'sum 3.5\n');
  assert.equal(reply.content.at(-1).text, 'They cost 3.5 together.');
  // The model was asked twice: before the code and after its end, never between.
  const sent = await upstreamRequests();
  assert.equal(sent.length, 2);
  const toolResults = sent[1].messages.flatMap((m) => m.content).filter((b) => b.type === 'tool_result');
  assert.equal(toolResults.length, 1, 'only the code\'s final result reaches the model');
  assert.match(toolResults[0].content, /sum 3\.5/);
});

// A server whose pauses expire after 2 s, for the unanswered call.
class ShortPauseStack extends Stack {
  configLines() {
    return [
      `auth: { tokens: [ { token: ${this.token}, owner: ${this.owner} } ] }`,
      `model: { baseUrl: "${this.upstreamUrl}", apiKey: up-key, models: { default: upstream-model }, toolResultTimeoutSec: 2 }`,
    ];
  }
}

test('programmatic tool calling: an unanswered call expires and raises in the code', async () => {
  const short = new ShortPauseStack(TOKEN, 'sdk', 'sandboxd-sdk-pause-');
  await short.start();
  try {
    const code = "try:\n    await get_price(item='apple')\nexcept ToolCallError as e:\n    failed = str(e)";
    await short.script([message([toolUse('toolu_ptc2', 'code_execution', { code })], 'tool_use')]);
    const shortClient = new Anthropic({ apiKey: TOKEN, baseURL: `${short.serverUrl}/api/gpt`, maxRetries: 0 });
    const params = {
      model: 'default', max_tokens: 1024, container: 'sdk-late',
      tools: [{ name: 'code_execution', type: 'code_execution_20250825' }, priceTool('code_execution_20250825')],
    };
    const messages = [{ role: 'user', content: 'Price an apple' }];
    const first = await shortClient.beta.messages.create({ ...params, messages });
    assert.equal(first.stop_reason, 'tool_use');
    const use = first.content.find((b) => b.type === 'tool_use');
    assert.equal(use.caller.type, 'code_execution_20250825');
    // The code learns of the expiry: the kernel runs it on and keeps its state.
    const run = async (cell) => (await fetch(`${short.serverUrl}/api/gpt/v1/containers/sdk-late/tools/code_execution`, {
      method: 'POST', headers: { 'x-api-key': TOKEN, 'content-type': 'application/json' }, body: JSON.stringify({ code: cell }),
    })).json();
    let seen;
    for (let i = 0; i < 60 && !(seen?.stdout ?? '').includes('TimeoutError'); ++i) {
      await new Promise((r) => setTimeout(r, 500));
      seen = await run("print(globals().get('failed'))");
    }
    assert.match(seen.stdout, /TimeoutError/);
    messages.push({ role: 'assistant', content: first.content });
    messages.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '1.5' }] });
    await assert.rejects(shortClient.beta.messages.create({ ...params, messages }), (err) => {
      assert.ok(err instanceof Anthropic.BadRequestError);
      assert.match(err.message, /is not waiting for tool results/);
      return true;
    });
  } finally {
    await short.stop();
  }
});
