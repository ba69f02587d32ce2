// The official `openai` npm package calling an OpenAI-compatible server (jsonmode serve)
// as any Node program does. Run by tests/support/node_client.py: reads a JSON array of
// requests on stdin, sends them one after another, prints a JSON array of results.
//
// Environment: JSONMODE_BASE_URL (".../v1"), JSONMODE_API_KEY.
// A request: {"api": "chat" | "responses", "params": {...create() params...},
//             "api_key": "..." (optional: overrides JSONMODE_API_KEY)}
// A result: {"ok": true, "reply": <the parsed body>, "output_text": <responses only>}
//   or, for a stream, {"ok": true, "chunks": [...events...], "content": "<joined deltas>",
//                      "usage": <the last usage seen>, "output_text": <responses only:
//                      the SDK's responses.stream() helper's final response>}
//   or {"ok": false, "error": {name, status, type, code, param, body, instanceOf: {...}}}.
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const requests = JSON.parse(readFileSync(0, "utf8"));

function client(apiKey) {
  return new OpenAI({
    baseURL: process.env.JSONMODE_BASE_URL,
    apiKey: apiKey ?? process.env.JSONMODE_API_KEY,
    maxRetries: 0,
    timeout: 30_000,
  });
}

function failure(error) {
  return {
    ok: false,
    error: {
      name: error?.constructor?.name ?? typeof error,
      message: String(error?.message ?? error),
      status: error?.status ?? null,
      type: error?.type ?? null,
      code: error?.code ?? null,
      param: error?.param ?? null,
      body: error?.error ?? null,
      instanceOf: {
        APIError: error instanceof OpenAI.APIError,
        UnprocessableEntityError: error instanceof OpenAI.UnprocessableEntityError,
        AuthenticationError: error instanceof OpenAI.AuthenticationError,
        BadRequestError: error instanceof OpenAI.BadRequestError,
      },
    },
  };
}

async function chat(openai, params) {
  if (!params.stream) {
    return { ok: true, reply: await openai.chat.completions.create(params) };
  }
  const stream = await openai.chat.completions.create(params);
  const chunks = [];
  let content = "";
  let usage = null;
  for await (const chunk of stream) {
    chunks.push(chunk);
    for (const choice of chunk.choices ?? []) {
      content += choice.delta?.content ?? "";
    }
    if (chunk.usage) usage = chunk.usage;
  }
  return { ok: true, chunks, content, usage };
}

async function responses(openai, params) {
  if (!params.stream) {
    const reply = await openai.responses.create(params);
    return { ok: true, reply, output_text: reply.output_text };
  }
  // the SDK's streaming helper: events as they come, then the final response it
  // assembled (with its output_text accessor)
  const { stream: _, ...rest } = params;
  const stream = openai.responses.stream(rest);
  const chunks = [];
  let content = "";
  for await (const event of stream) {
    chunks.push(event);
    if (event.type === "response.output_text.delta") content += event.delta;
  }
  const final = await stream.finalResponse();
  return { ok: true, chunks, content, usage: final.usage, output_text: final.output_text };
}

const results = [];
for (const request of requests) {
  const openai = client(request.api_key);
  try {
    const call = request.api === "responses" ? responses : chat;
    results.push(await call(openai, request.params));
  } catch (error) {
    results.push(failure(error));
  }
}
process.stdout.write(JSON.stringify(results));
