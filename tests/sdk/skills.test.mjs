// Skills through the official Anthropic TypeScript SDK, unmodified: client.beta.skills
// (create from files with toFile, list, retrieve, versions, delete) and container.skills
// in beta.messages.create, against a real `sandboxd serve` whose upstream is the scripted
// model server. Run by CTest with SANDBOXD_PATH and SCRIPTED_UPSTREAM_PATH.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Stack, message, text, toolUse } from '../harness.mjs';
import Anthropic, { toFile } from '@anthropic-ai/sdk';

const TOKEN = 'sdk-secret-token';
const stack = new Stack(TOKEN, 'sdk', 'sandboxd-sdk-');
const script = (steps) => stack.script(steps);
const upstreamRequests = () => stack.upstreamRequests();

before(() => stack.start());
after(() => stack.stop());

// The SDK appends /v1/messages to its base URL.
const client = () => new Anthropic({ apiKey: TOKEN, baseURL: `${stack.serverUrl}/api/gpt`, maxRetries: 0 });

const SKILL_MD = `---
name: sdk-report
description: Writes a short report file into the outputs folder. Use when asked for a report.
---
# SDK report
Run \`python3 /mnt/skills/sdk-report/scripts/report.py NAME\`.
`;
const REPORT_PY = `import sys
with open('/mnt/user-data/outputs/' + sys.argv[1], 'w') as f:
    f.write('report from the sdk-report skill\\n')
print('report written')
`;
const skillFiles = async (md = SKILL_MD) => [
  await toFile(Buffer.from(md), 'sdk-report/SKILL.md'),
  await toFile(Buffer.from(REPORT_PY), 'sdk-report/scripts/report.py'),
];

test('beta.skills: create, retrieve, list, versions, delete', async () => {
  const skills = client().beta.skills;
  const skill = await skills.create({ files: await skillFiles(), display_name: 'SDK report' });
  assert.match(skill.id, /^skill_/);
  assert.equal(skill.type, 'skill');
  assert.equal(skill.display_name, 'SDK report');
  assert.equal(skill.source.type, 'custom');
  assert.match(skill.latest_version_id, /^\d{16}$/);

  const fetched = await skills.retrieve(skill.id);
  assert.deepEqual(fetched, skill);

  const ids = [];
  for await (const s of skills.list({ source: 'custom', limit: 1 })) ids.push(s.id);
  assert.deepEqual(ids, [skill.id]);
  const builtins = [];
  for await (const s of skills.list({ source: 'anthropic', limit: 2 })) builtins.push(s.id);  // pages of 2
  for (const name of ['xlsx', 'docx', 'pdf', 'pptx', 'data-analysis']) assert.ok(builtins.includes(name), name);

  const v2 = await skills.versions.create(skill.id, {
    files: await skillFiles(SKILL_MD.replace('Writes a short report', 'Version two writes a report')),
  });
  assert.equal(v2.type, 'skill_version');
  assert.equal(v2.skill_id, skill.id);
  assert.equal(v2.name, 'sdk-report');
  assert.match(v2.description, /^Version two/);
  assert.equal((await skills.retrieve(skill.id)).latest_version_id, v2.id);
  const versions = [];
  for await (const v of skills.versions.list(skill.id, { limit: 1 })) versions.push(v.id);
  assert.deepEqual(versions, [v2.id, skill.latest_version_id]);
  const first = await skills.versions.retrieve(skill.latest_version_id, { skill_id: skill.id });
  assert.match(first.description, /^Writes a short report/);

  // The Skills guide's deletion flow: every version, then the skill.
  for await (const v of skills.versions.list(skill.id)) {
    const gone = await skills.versions.delete(v.version, { skill_id: skill.id });
    assert.equal(gone.type, 'skill_version_deleted');
    assert.equal(gone.id, v.id);
  }
  await assert.rejects(skills.versions.retrieve(skill.latest_version_id, { skill_id: skill.id }),
                       (e) => e instanceof Anthropic.NotFoundError);
  assert.deepEqual((await skills.versions.list(skill.id)).data, []);
  const deleted = await skills.delete(skill.id);
  assert.deepEqual(deleted, { id: skill.id, type: 'skill_deleted' });
  await assert.rejects(skills.retrieve(skill.id), (e) => e instanceof Anthropic.NotFoundError);
});

test('beta.skills.create refuses a bad SKILL.md with a 400', async () => {
  await assert.rejects(
    client().beta.skills.create({ files: await skillFiles('---\nname: Not Valid\ndescription: x\n---\n') }),
    (e) => e instanceof Anthropic.BadRequestError && /lowercase/.test(e.message));
});

test('beta.messages.create with container.skills runs the skill, and the Files API serves its output', async () => {
  const skill = await client().beta.skills.create({ files: await skillFiles() });
  await script([
    message([toolUse('toolu_sk1', 'bash_code_execution', {
      command: 'grep -c sdk-report /mnt/skills/sdk-report/SKILL.md && python3 /mnt/skills/sdk-report/scripts/report.py r.txt',
    })], 'tool_use'),
    message([text('The report is ready.')], 'end_turn'),
  ]);
  const reply = await client().beta.messages.create({
    model: 'default',
    max_tokens: 1024,
    betas: ['code-execution-2025-08-25', 'skills-2025-10-02'],
    container: { id: 'sdk-skills', skills: [{ type: 'custom', skill_id: skill.id, version: 'latest' },
                                            { type: 'anthropic', skill_id: 'xlsx' }] },
    messages: [{ role: 'user', content: 'Make the report.' }],
    tools: [{ name: 'code_execution', type: 'code_execution_20250825' }],
  });
  assert.equal(reply.stop_reason, 'end_turn');
  assert.deepEqual(reply.content[1].content,
                   { type: 'bash_code_execution_result', stdout: '2\nreport written\n', stderr: '', return_code: 0,
                     content: [{ type: 'bash_code_execution_output',
                                 file_id: Buffer.from('/mnt/user-data/outputs/r.txt').toString('base64url') }] });
  assert.equal(reply.container.id, 'sdk-skills');
  assert.equal(reply.container.skills.length, 2);
  assert.deepEqual(reply.container.skills[0], { type: 'custom', skill_id: skill.id, version: skill.latest_version_id });
  assert.equal(reply.container.skills[1].skill_id, 'xlsx');
  const sent = await upstreamRequests();
  const system = JSON.stringify(sent[sent.length - 2].system);
  assert.match(system, /\/mnt\/skills\/sdk-report\/SKILL\.md/);
  assert.match(system, /\/mnt\/skills\/xlsx\/SKILL\.md/);

  const files = await fetch(`${stack.serverUrl}/api/gpt/v1/files?scope_id=sdk-skills`, {
    headers: { authorization: `Bearer ${TOKEN}` },
  }).then((r) => r.json());
  const report = files.data.find((f) => f.filename === 'r.txt');
  assert.ok(report, JSON.stringify(files));
  const content = await fetch(`${stack.serverUrl}/api/gpt/v1/files/${report.id}/content?scope_id=sdk-skills`, {
    headers: { authorization: `Bearer ${TOKEN}` },
  }).then((r) => r.text());
  assert.equal(content, 'report from the sdk-report skill\n');
  await client().beta.skills.delete(skill.id);
});

test('container.skills without the code execution tool is a 400', async () => {
  await assert.rejects(client().beta.messages.create({
    model: 'default',
    max_tokens: 10,
    container: { skills: [{ type: 'anthropic', skill_id: 'pdf' }] },
    messages: [{ role: 'user', content: 'hi' }],
  }), (e) => e instanceof Anthropic.BadRequestError && /code execution tool/.test(e.message));
});
