// Client compatibility beyond Anthropic's own SDK: the Vercel AI SDK's Anthropic provider
// (`ai` + `@ai-sdk/anthropic`) and LangChain's ChatAnthropic (`@langchain/anthropic`),
// unmodified, against a real `sandboxd serve` whose upstream is the scripted model server
// (tests/scripted_upstream.h). Both validate responses against Anthropic's types (the
// provider with zod schemas), so a block that is not in Anthropic's shape fails them.
// Run by CTest with SANDBOXD_PATH and SCRIPTED_UPSTREAM_PATH.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Stack, message, text, toolUse } from '../harness.mjs';
import { generateText, streamText } from 'ai';
import { createAnthropic } from '@ai-sdk/anthropic';
import { ChatAnthropic } from '@langchain/anthropic';
import { HumanMessage } from '@langchain/core/messages';

const TOKEN = 'clients-secret-token';
const stack = new Stack(TOKEN, 'clients', 'sandboxd-clients-');
const script = (steps) => stack.script(steps);

before(() => stack.start());
after(() => stack.stop());

const fileId = (path) => Buffer.from(path).toString('base64url');
const download = async (container, id) => {
  const res = await fetch(`${stack.serverUrl}/api/gpt/v1/files/${id}/content?scope_id=${container}`,
                          { headers: { Authorization: `Bearer ${TOKEN}` } });
  assert.equal(res.status, 200, `download of ${id}`);
  return res.text();
};

// The provider appends /messages to its base URL.
const anthropic = () => createAnthropic({ apiKey: TOKEN, baseURL: `${stack.serverUrl}/api/gpt/v1` });

// The model writes one output file with bash, then answers.
const writesOutput = (id, name, body) => [
  message([text('Writing it.'),
           toolUse(id, 'bash_code_execution', { command: `printf '${body}' > /mnt/user-data/outputs/${name}; echo written` })],
          'tool_use'),
  message([text(`Saved ${name}.`)], 'end_turn'),
];

for (const version of ['codeExecution_20250825', 'codeExecution_20260120']) {
  test(`ai generateText with anthropic.tools.${version}`, async () => {
    const container = `vercel-${version}`;
    await script(writesOutput('toolu_vg1', 'g.csv', 'a,b\\n1,2\\n'));
    const provider = anthropic();
    const result = await generateText({
      model: provider('default'),
      prompt: 'Save a CSV to outputs',
      tools: { code_execution: provider.tools[version]() },
      providerOptions: { anthropic: { container: { id: container } } },
    });
    assert.equal(result.text, 'Writing it.Saved g.csv.');
    const call = result.content.find((p) => p.type === 'tool-call');
    assert.equal(call.providerExecuted, true);
    assert.equal(call.toolName, 'code_execution');
    const output = result.content.find((p) => p.type === 'tool-result');
    assert.equal(output.toolCallId, call.toolCallId);
    assert.equal(output.output.type, 'bash_code_execution_result');
    assert.equal(output.output.stdout, 'written\n');
    const id = fileId('/mnt/user-data/outputs/g.csv');
    assert.deepEqual(output.output.content, [{ type: 'bash_code_execution_output', file_id: id }]);
    assert.equal(await download(container, id), 'a,b\n1,2\n');
    // Provider metadata carries the container.
    assert.equal(result.providerMetadata.anthropic.container.id, container);
    assert.match(result.providerMetadata.anthropic.container.expiresAt, /Z$/);

    // The provider sends the turn back as history (server_tool_use, the result with its
    // content array): accepted, and the upstream gets it as tool_use / tool_result.
    await script([message([text('Still there.')], 'end_turn')]);
    const next = await generateText({
      model: provider('default'),
      messages: [{ role: 'user', content: 'Save a CSV to outputs' }, ...result.response.messages,
                 { role: 'user', content: 'Is it there?' }],
      tools: { code_execution: provider.tools[version]() },
      providerOptions: { anthropic: { container: { id: container } } },
    });
    assert.equal(next.text, 'Still there.');
    const [sent] = await stack.upstreamRequests();
    const replayed = sent.messages.flatMap((m) => (Array.isArray(m.content) ? m.content : []));
    const use = replayed.find((b) => b.type === 'tool_use');
    assert.equal(use.name, 'bash_code_execution');
    const back = replayed.find((b) => b.type === 'tool_result' && b.tool_use_id === use.id);
    assert.match(back.content, /written/);
  });
}

test('ai streamText with anthropic.tools.codeExecution_20250825', async () => {
  const container = 'vercel-stream';
  await script(writesOutput('toolu_vs1', 's.txt', 'streamed'));
  const provider = anthropic();
  const result = streamText({
    model: provider('default'),
    prompt: 'Save a file',
    tools: { code_execution: provider.tools.codeExecution_20250825() },
    providerOptions: { anthropic: { container: { id: container } } },
  });
  const parts = [];
  for await (const part of result.fullStream) parts.push(part);
  assert.deepEqual(parts.filter((p) => p.type === 'error'), [], 'no error part');
  const output = parts.find((p) => p.type === 'tool-result');
  assert.ok(output, `a tool-result part: ${JSON.stringify(parts.map((p) => p.type))}`);
  assert.equal(output.output.type, 'bash_code_execution_result');
  const id = fileId('/mnt/user-data/outputs/s.txt');
  assert.deepEqual(output.output.content, [{ type: 'bash_code_execution_output', file_id: id }]);
  assert.equal(await download(container, id), 'streamed');
  assert.equal(await result.text, 'Writing it.Saved s.txt.');
  assert.equal((await result.providerMetadata).anthropic.container.id, container);
});

test('ai generateText: an editor error has Anthropic\'s shape (no detail)', async () => {
  await script([
    message([toolUse('toolu_ve1', 'text_editor_code_execution', { command: 'view', path: 'absent.txt' })], 'tool_use'),
    message([text('No such file.')], 'end_turn'),
  ]);
  const provider = anthropic();
  const result = await generateText({
    model: provider('default'),
    prompt: 'Show absent.txt',
    tools: { code_execution: provider.tools.codeExecution_20250825() },
    providerOptions: { anthropic: { container: { id: 'vercel-editor' } } },
  });
  const output = result.content.find((p) => p.type === 'tool-result');
  assert.equal(output.output.type, 'text_editor_code_execution_tool_result_error');
  assert.equal(output.output.error_code, 'unavailable');
  assert.equal(output.output.detail, undefined);
});

// LangChain: the server tool bound as Anthropic's tool definition.
const chat = () => new ChatAnthropic({
  model: 'default', apiKey: TOKEN, anthropicApiUrl: `${stack.serverUrl}/api/gpt`, maxRetries: 0,
});

test('LangChain ChatAnthropic with the code execution tool bound', async () => {
  const container = 'langchain-c';
  await script(writesOutput('toolu_lc1', 'l.txt', 'from langchain'));
  const model = chat().bindTools([{ type: 'code_execution_20250825', name: 'code_execution' }]);
  const question = new HumanMessage('Save a file');
  const reply = await model.invoke([question], { container });
  const blocks = reply.content;
  assert.deepEqual(blocks.map((b) => b.type),
                   ['text', 'server_tool_use', 'bash_code_execution_tool_result', 'text']);
  assert.equal(blocks[1].name, 'bash_code_execution');
  const id = fileId('/mnt/user-data/outputs/l.txt');
  assert.deepEqual(blocks[2].content.content, [{ type: 'bash_code_execution_output', file_id: id }]);
  assert.equal(await download(container, id), 'from langchain');
  assert.deepEqual(reply.tool_calls, [], 'a server tool is no client tool call');
  assert.equal(reply.response_metadata.container.id, container);

  // The reply goes back as history, in LangChain's shape of it.
  await script([message([text('Yes.')], 'end_turn')]);
  const next = await model.invoke([question, reply, new HumanMessage('Done?')], { container });
  assert.equal(next.content.at(-1).text ?? next.content, 'Yes.');

  // Streaming: the text arrives as chunks.
  await script(writesOutput('toolu_lc2', 'l2.txt', 'streamed'));
  let streamed = '';
  for await (const chunk of await model.stream([new HumanMessage('Again')], { container }))
    for (const part of Array.isArray(chunk.content) ? chunk.content : [{ type: 'text', text: chunk.content }])
      if (part.type === 'text' && part.text) streamed += part.text;
  assert.equal(streamed, 'Writing it.Saved l2.txt.');
  assert.equal(await download(container, fileId('/mnt/user-data/outputs/l2.txt')), 'streamed');
});
