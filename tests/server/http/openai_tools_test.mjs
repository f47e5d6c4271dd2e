// Tool calls end to end through the official `openai` npm client (pinned in
// tests/oracles/package.json) against a real flatstate-server (started by openai_tools_test.sh).
//   node openai_tools_test.mjs prepare MODEL_DIR   # the model folder (openai_tools_fixture.mjs)
//   node openai_tools_test.mjs run                 # FS_BASE_URL, FS_MODEL_DIR, FS_WORK set
// Each check is one named step (exit 1 if any fails); docs/http-api.md lists them:
//   - tool_choice "required" and a named function (two tools, different schemas): one call in
//     message.tool_calls (id, type, a name among the tools / the named one, arguments a JSON
//     text valid for that tool's parameters), content null, finish_reason "tool_calls";
//   - the same streamed, folded by index as OpenAI clients do and through the client's
//     chat.completions.stream(...).finalChatCompletion(): equal to the unstreamed reply;
//   - "none": no calls; "auto": text or calls, finish_reason consistent (a `grammar` makes one
//     reply a call), streamed equal to unstreamed;
//   - tool results back through the template (by hand, and by the client's runTools helper):
//     accepted, usage.prompt_tokens equal to the oracle's count (openai_tools_fixture.mjs);
//   - bad tools / tool_choice: the client raises BadRequestError (400) naming the field.
import assert from 'node:assert/strict';

import {prepareModel, promptOracle, requireOracle} from './openai_tools_fixture.mjs';

const MODEL = 'qwen3-tools';
const TOOLS = [
  {type: 'function', function: {
    name: 'get_weather', description: 'Weather now',
    parameters: {type: 'object', properties: {
      city: {type: 'string', maxLength: 10},
      unit: {type: 'string', enum: ['celsius', 'fahrenheit']}},
      required: ['city', 'unit'], additionalProperties: false}}},
  {type: 'function', function: {
    name: 'add', description: 'a + b',
    parameters: {type: 'object', properties: {
      a: {type: 'integer', minimum: 0, maximum: 999},
      b: {type: 'number'},
      exact: {type: 'boolean'}},
      required: ['a', 'b', 'exact'], additionalProperties: false}}},
];
const SCHEMA = Object.fromEntries(TOOLS.map((t) => [t.function.name, t.function.parameters]));
const ASK = [{role: 'user', content: 'Weather in Oslo, or 2 + 3?'}];

// The errors of `v` against `schema`, in the subset TOOLS uses ([] when valid).
function schemaErrors(schema, v, at = '$') {
  const is = {
    object: (x) => x !== null && typeof x === 'object' && !Array.isArray(x),
    string: (x) => typeof x === 'string',
    integer: (x) => Number.isInteger(x),
    number: (x) => typeof x === 'number' && Number.isFinite(x),
    boolean: (x) => typeof x === 'boolean',
  };
  if (schema.type && !is[schema.type](v)) return [`${at}: ${JSON.stringify(v)} not ${schema.type}`];
  const errs = [];
  if (schema.enum && !schema.enum.includes(v)) errs.push(`${at}: not in enum`);
  if (typeof v === 'string' && [...v].length > (schema.maxLength ?? Infinity)) {
    errs.push(`${at}: too long`);  // in code points, as JSON Schema counts
  }
  if (schema.minimum !== undefined && v < schema.minimum) errs.push(`${at}: below minimum`);
  if (schema.maximum !== undefined && v > schema.maximum) errs.push(`${at}: above maximum`);
  if (schema.type === 'object') {
    for (const k of schema.required ?? []) if (!(k in v)) errs.push(`${at}: ${k} missing`);
    for (const [k, val] of Object.entries(v)) {
      if (schema.properties?.[k]) {
        errs.push(...schemaErrors(schema.properties[k], val, `${at}.${k}`));
      } else if (schema.additionalProperties === false) {
        errs.push(`${at}: ${k} is not a property`);
      }
    }
  }
  return errs;
}

// A call as OpenAI documents it, to one of TOOLS (to `name` when given), arguments valid.
function checkCall(call, name) {
  assert.equal(typeof call.id, 'string');
  assert.ok(call.id.length > 0, 'empty tool call id');
  assert.equal(call.type, 'function');
  assert.ok(call.function.name in SCHEMA, `unknown function ${call.function.name}`);
  if (name) assert.equal(call.function.name, name);
  assert.equal(typeof call.function.arguments, 'string');
  const args = JSON.parse(call.function.arguments);
  assert.deepEqual(schemaErrors(SCHEMA[call.function.name], args), [],
                   `${call.function.name}(${call.function.arguments})`);
}

// What two replies must share: finish reason, content, and each call's name and arguments
// (ids are new per reply).
function essence(choice) {
  const m = choice.message;
  return {finish: choice.finish_reason, content: m.content ?? null,
          calls: (m.tool_calls ?? []).map((c) => [c.function.name, c.function.arguments])};
}

// A stream folded into one choice the way OpenAI's own examples do: content appended, tool call
// fragments gathered by `index` (id / type / name set once, arguments appended).
async function accumulate(stream) {
  const message = {content: null, tool_calls: []};
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      assert.equal(c.index, 0);
      const d = c.delta ?? {};
      if (d.content) message.content = (message.content ?? '') + d.content;
      for (const t of d.tool_calls ?? []) {
        assert.ok(Number.isInteger(t.index), `no index: ${JSON.stringify(t)}`);
        const slot = (message.tool_calls[t.index] ??= {function: {name: '', arguments: ''}});
        if (t.id) slot.id = t.id;
        if (t.type) slot.type = t.type;
        if (t.function?.name) slot.function.name = t.function.name;
        if (t.function?.arguments) slot.function.arguments += t.function.arguments;
      }
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  if (message.tool_calls.length === 0) delete message.tool_calls;
  return {choice: {message, finish_reason: finish}, usage};
}

async function main() {
  const {OpenAI, BadRequestError} = requireOracle('openai');
  const {render: oracle, count: tokenCounts} =
      promptOracle(process.env.FS_MODEL_DIR, process.env.FS_WORK);
  const sent = [];  // every request body the client sent, parsed
  const client = new OpenAI({
    baseURL: process.env.FS_BASE_URL, apiKey: 'unused', maxRetries: 0, timeout: 60_000,
    fetch: (url, init) => {
      sent.push(JSON.parse(init.body));
      return fetch(url, init);
    },
  });
  const base = {model: MODEL, messages: ASK, tools: TOOLS, temperature: 1.0, max_tokens: 400};
  const streamed = async (body) =>
    (await accumulate(await client.chat.completions.create({...body, stream: true}))).choice;

  const results = [];
  async function step(name, fn) {
    try {
      const detail = await fn();
      results.push(true);
      console.log(`ok   ${name}${detail ? `: ${detail}` : ''}`);
    } catch (e) {
      results.push(false);
      console.log(`FAIL ${name}\n     ${String(e?.stack ?? e).split('\n').join('\n     ')}`);
    }
  }

  await step('the schema check refuses wrong arguments', () => {
    assert.notDeepEqual(schemaErrors(SCHEMA.get_weather, {city: 'Oslo', unit: 'kelvin'}), []);
    assert.notDeepEqual(schemaErrors(SCHEMA.add, {a: 1.5, b: 2, exact: true}), []);
    assert.notDeepEqual(schemaErrors(SCHEMA.add, {a: 1, b: 2}), []);
    const weather = {city: 'Oslo', unit: 'celsius'};
    assert.notDeepEqual(schemaErrors(SCHEMA.get_weather, {...weather, x: 1}), []);
    assert.notDeepEqual(schemaErrors(SCHEMA.get_weather, {...weather, city: 'x'.repeat(11)}), []);
    assert.deepEqual(schemaErrors(SCHEMA.get_weather, weather), []);
    assert.deepEqual(schemaErrors(SCHEMA.add, {a: 1, b: -2.5e3, exact: false}), []);
  });

  await step('a plain request: usage.prompt_tokens is the oracle count (tools in the prompt)',
             async () => {
    const r = await client.chat.completions.create({...base, max_tokens: 2});
    const [text] = oracle([sent.at(-1)]);
    assert.ok(text.includes('<tools>\n{"type": "function", "function": {"name": "get_weather"'),
              `tools not in the oracle text: ${text}`);
    assert.equal(r.usage.prompt_tokens, (await tokenCounts([text]))[0]);
    return `${r.usage.prompt_tokens} prompt tokens`;
  });

  const forced = {};  // tool_choice label -> the unstreamed reply
  const named = (name) => ({type: 'function', function: {name}});
  for (const [label, toolChoice, name, seed] of [['required', 'required', null, 5],
    ['named get_weather', named('get_weather'), 'get_weather', 6],
    ['named add', named('add'), 'add', 7]]) {
    const body = {...base, tool_choice: toolChoice, seed};
    await step(`tool_choice ${label}: one valid call, finish_reason tool_calls`, async () => {
      const r = await client.chat.completions.create(body);
      forced[label] = r;
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'tool_calls');
      assert.equal(c.message.role, 'assistant');
      assert.equal(c.message.content, null);
      assert.equal(c.message.tool_calls?.length, 1, JSON.stringify(c.message));
      checkCall(c.message.tool_calls[0], name);
      const f = c.message.tool_calls[0].function;
      return `${f.name}(${f.arguments}), ${r.usage.completion_tokens} tokens`;
    });
    await step(`tool_choice ${label}, streamed: delta.tool_calls by index equal the reply`,
               async () => {
      const s = await client.chat.completions.create(
          {...body, stream: true, stream_options: {include_usage: true}});
      const {choice, usage} = await accumulate(s);
      assert.ok(forced[label], 'no unstreamed reply to compare with');
      checkCall(choice.message.tool_calls[0], name);
      assert.deepEqual(essence(choice), essence(forced[label].choices[0]));
      assert.equal(usage?.prompt_tokens, forced[label].usage.prompt_tokens);
      assert.equal(usage?.completion_tokens, forced[label].usage.completion_tokens);
    });
    await step(`tool_choice ${label}, chat.completions.stream().finalChatCompletion()`,
               async () => {
      const final = await client.chat.completions.stream(body).finalChatCompletion();
      checkCall(final.choices[0].message.tool_calls[0], name);
      assert.deepEqual(essence(final.choices[0]), essence(forced[label].choices[0]));
    });
  }

  for (const [toolChoice, seed] of [['none', 21], ['auto', 22], ['auto', 23]]) {
    await step(`tool_choice ${toolChoice} (seed ${seed}): a consistent reply, streamed equal`,
               async () => {
      const body = {...base, tool_choice: toolChoice, seed, max_tokens: 40};
      const r = await client.chat.completions.create(body);
      const c = r.choices[0];
      if (c.message.tool_calls?.length) {
        assert.notEqual(toolChoice, 'none', 'tool_choice none gave tool calls');
        assert.equal(c.finish_reason, 'tool_calls');
        for (const call of c.message.tool_calls) assert.ok(call.function.name in SCHEMA);
      } else {
        assert.ok(['stop', 'length'].includes(c.finish_reason), c.finish_reason);
        assert.equal(typeof c.message.content, 'string');
      }
      assert.deepEqual(essence(await streamed(body)), essence(c));
      return c.message.tool_calls?.length ? 'tool calls' : `text, finish_reason ${c.finish_reason}`;
    });
  }

  // A reply that is a call in the template's form: parsed into tool_calls with "auto", left as
  // text with "none". A grammar (llama.cpp's extension, allowed beside these two) makes this
  // random model write one.
  const callGrammar = 'root ::= "<tool_call>\\n{\\"name\\": \\"get_weather\\", \\"arguments\\": ' +
      '{\\"city\\": \\"" [a-z] [a-z]? [a-z]? "\\", \\"unit\\": \\"celsius\\"}}\\n</tool_call>"';
  await step('tool_choice auto: a reply that is a Hermes call becomes tool_calls', async () => {
    const body = {...base, tool_choice: 'auto', seed: 8, grammar: callGrammar};
    const r = await client.chat.completions.create(body);
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c));
    assert.equal(c.message.content, null);
    assert.equal(c.message.tool_calls.length, 1);
    checkCall(c.message.tool_calls[0], 'get_weather');
    assert.deepEqual(essence(await streamed(body)), essence(c));
    return c.message.tool_calls[0].function.arguments;
  });
  await step('tool_choice none: a reply that is a Hermes call stays text', async () => {
    const body = {...base, tool_choice: 'none', seed: 8, grammar: callGrammar};
    const r = await client.chat.completions.create(body);
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'stop', JSON.stringify(c));
    assert.equal(c.message.tool_calls, undefined);
    assert.match(c.message.content,
                 /^<tool_call>\n\{"name": "get_weather", "arguments": .*\n<\/tool_call>$/s);
    assert.deepEqual(essence(await streamed(body)), essence(c));
  });

  await step('a tool result back through the template: prompt_tokens is the oracle count',
             async () => {
    const reply = forced['named get_weather'];
    assert.ok(reply, 'no forced get_weather reply to answer');
    const call = reply.choices[0].message.tool_calls[0];
    const result = '{"temperature": 21, "unit": "celsius"}';
    const messages = [...ASK, reply.choices[0].message,
                      {role: 'tool', tool_call_id: call.id, content: result}];
    const r = await client.chat.completions.create({...base, messages, max_tokens: 4, seed: 9});
    const body = sent.at(-1);
    assert.equal(body.messages[1].content, null);  // as the client sends a call back
    const [text, withoutResult] = oracle([body, {...body, messages: body.messages.slice(0, 2)}]);
    assert.ok(text.includes(`<tool_response>\n${result}\n</tool_response>`), text);
    assert.ok(text.includes(`<tool_call>\n{"name": "get_weather", "arguments": ${
      call.function.arguments}}\n</tool_call>`), text);
    const [want, without] = await tokenCounts([text, withoutResult]);
    assert.ok(want > without);
    assert.equal(r.usage.prompt_tokens, want);
    const detail = `${want} prompt tokens (${without} without the result)`;
    // The server's own rendering, as text.
    const applied = await fetch(new URL('/apply-template', process.env.FS_BASE_URL), {
      method: 'POST', headers: {'content-type': 'application/json'},
      body: JSON.stringify({model: MODEL, messages: body.messages, tools: body.tools})});
    assert.equal(applied.status, 200, await applied.clone().text());
    assert.equal((await applied.json()).prompt, text);
    return detail;
  });

  await step('runTools: the client runs the calls and sends their results back', async () => {
    const ran = [];
    const tools = TOOLS.map((t) => ({type: 'function', function: {
      ...t.function,
      parse: JSON.parse,
      function: (args) => {
        ran.push([t.function.name, args]);
        return {ok: true, tool: t.function.name};
      }}}));
    const before = sent.length;
    const params = {model: MODEL, messages: ASK, tools, tool_choice: 'required', seed: 10,
                    max_tokens: 400};
    const runner = client.chat.completions.runTools(params, {maxChatCompletions: 2});
    await runner.done();
    const completions = runner.allChatCompletions();
    assert.equal(completions.length, 2);
    assert.equal(ran.length, 2);
    for (const [name, args] of ran) assert.deepEqual(schemaErrors(SCHEMA[name], args), []);
    assert.deepEqual(runner.messages.map((m) => m.role),
                     ['user', 'assistant', 'tool', 'assistant', 'tool']);
    const bodies = sent.slice(before);
    assert.equal(bodies.length, 2);
    assert.deepEqual(bodies[1].messages.map((m) => m.role), ['user', 'assistant', 'tool']);
    assert.equal(bodies[1].messages[1].content, null);
    const texts = oracle(bodies);
    const counts = await tokenCounts(texts);
    assert.deepEqual(completions.map((c) => c.usage.prompt_tokens), counts);
    // The streaming runner: the same two completions.
    const streaming = client.chat.completions.runTools(
        {...params, stream: true}, {maxChatCompletions: 2});
    await streaming.done();
    assert.deepEqual(streaming.allChatCompletions().map((c) => essence(c.choices[0])),
                     completions.map((c) => essence(c.choices[0])));
    return `ran ${ran.slice(0, 2).map(([name]) => name).join(', ')}; prompts ${counts.join(', ')}`;
  });

  const refused = [
    ['tool_choice naming a function not in tools',
     {tool_choice: {type: 'function', function: {name: 'get_time'}}}, 'tool_choice'],
    ['tool_choice not a known value', {tool_choice: 'sometimes'}, 'tool_choice'],
    ['a tool without function.name',
     {tools: [{type: 'function', function: {parameters: {type: 'object'}}}]},
     'tools[0].function.name'],
    ['a tool without function',
     {tools: [TOOLS[0], {type: 'function'}]}, 'tools[1].function'],
    ['a tool whose parameters is not an object',
     {tools: [{type: 'function', function: {name: 'f', parameters: 'none'}}]},
     'tools[0].function.parameters'],
    ['a tool of another type',
     {tools: [{type: 'custom', custom: {name: 'f'}}]}, 'tools[0].type'],
    ['a forced call whose schema cannot be forced',
     {tool_choice: 'required', tools: [{type: 'function', function: {name: 'f', parameters: {
       type: 'object', properties: {n: {type: 'integer', multipleOf: 3}}}}}]}, 'tools'],
  ];
  for (const [label, extra, field] of refused) {
    await step(`400 naming ${field}: ${label}`, async () => {
      const e = await client.chat.completions.create({...base, ...extra, max_tokens: 2})
          .then(() => null, (err) => err);
      assert.ok(e instanceof BadRequestError, `no BadRequestError: ${e}`);
      assert.equal(e.status, 400);
      assert.ok(e.message.includes(field), e.message);
      assert.equal(e.param, field);
    });
  }

  const failed = results.filter((ok) => !ok).length;
  console.log(`${results.length - failed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

if (process.argv[2] === 'prepare') {
  prepareModel(process.argv[3]);
} else if (process.argv[2] === 'run') {
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
} else {
  console.error('usage: openai_tools_test.mjs prepare MODEL_DIR | run');
  process.exit(2);
}
