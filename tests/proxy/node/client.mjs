// One streaming request through the official OpenAI Node SDK, for tests/proxy/test_foreign_clients.py
// and tests/proxy/test_strict.py.
//
//   node client.mjs --base-url URL --route chat|responses --scenario NAME --job N --timeout SECONDS
//                   [--tools]
//
// The request offers the provider's tool when the scenario is a tool_call one, or with --tools
// (a clean_cut then cuts a tool call's arguments).
//
// URL is what the SDK's baseURL gets ("http://127.0.0.1:PORT/v1", or the proxy's
// ".../fake/v1"). Prints one JSON line: what the application saw. Exits 0 whenever it printed,
// whatever the stream did; a crash of this script is a non-zero exit without that line.
//
// The SDK's own `timeout` stops at the response headers, so the read timeout a streaming
// application sets (no bytes for SECONDS) is added here, around fetch: when it fires the body
// read fails with a ReadTimeoutError and the connection is closed, as httpx's read timeout does.

import { parseArgs } from "node:util";
import OpenAI from "openai";

const { values: args } = parseArgs({
  options: {
    "base-url": { type: "string" },
    route: { type: "string" },
    scenario: { type: "string" },
    job: { type: "string" },
    timeout: { type: "string" },
    tools: { type: "boolean", default: false },
  },
  strict: true,
});
for (const name of ["base-url", "route", "scenario", "job", "timeout"]) {
  if (args[name] === undefined) throw new Error(`--${name} is required`);
}
const readTimeoutMs = Number(args.timeout) * 1000;

class ReadTimeoutError extends Error {
  constructor(ms) {
    super(`no bytes for ${ms} ms`);
    this.name = "ReadTimeoutError";
  }
}

// The response with its body read under the read timeout (each read gets `ms` to return).
function withReadTimeout(response, ms) {
  if (!response.body) return response;
  const source = response.body.getReader();
  const body = new ReadableStream({
    async pull(controller) {
      let timer;
      const expired = new Promise((_, reject) => {
        timer = setTimeout(() => reject(new ReadTimeoutError(ms)), ms);
      });
      try {
        const { value, done } = await Promise.race([source.read(), expired]);
        if (done) controller.close();
        else controller.enqueue(value);
      } catch (error) {
        if (error instanceof ReadTimeoutError) source.cancel(error).catch(() => {}); // hang up
        controller.error(error);
      } finally {
        clearTimeout(timer);
      }
    },
    cancel(reason) {
      return source.cancel(reason);
    },
  });
  return new Response(body, {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  });
}

const client = new OpenAI({
  baseURL: args["base-url"],
  apiKey: "demo",
  maxRetries: 0,
  timeout: readTimeoutMs, // for the headers; the body is under withReadTimeout
  fetch: async (url, init) => withReadTimeout(await fetch(url, init), readTimeoutMs),
});
const headers = {
  "x-otelsse-demo-scenario": args.scenario,
  "x-otelsse-demo-job": args.job,
};
const tools = args.tools || args.scenario.startsWith("tool_call");
const weather = {
  name: "get_weather",
  description: "Current weather for a city.",
  parameters: {
    type: "object",
    properties: { city: { type: "string" } },
    required: ["city"],
  },
};
const prompt = "Why do streamed answers need a terminal event?";

// What the application saw: the events (chunks or typed events) in order, the text and tool
// arguments they carried, how the model said it finished, and what was thrown.
const seen = { events: [], text: [], tool_arguments: "", finish_reason: null, error: null };

async function chat() {
  const stream = await client.chat.completions.create(
    {
      model: "gpt-4o-mini",
      stream: true,
      messages: [{ role: "user", content: prompt }],
      ...(tools ? { tools: [{ type: "function", function: weather }] } : {}),
    },
    { headers },
  );
  for await (const chunk of stream) {
    seen.events.push(chunk.object);
    for (const choice of chunk.choices) {
      if (choice.delta?.content) seen.text.push(choice.delta.content);
      for (const call of choice.delta?.tool_calls ?? []) {
        seen.tool_arguments += call.function?.arguments ?? "";
      }
      if (choice.finish_reason) seen.finish_reason = choice.finish_reason;
    }
  }
}

async function responses() {
  const stream = await client.responses.create(
    {
      model: "gpt-4.1",
      stream: true,
      input: prompt,
      ...(tools ? { tools: [{ type: "function", ...weather }] } : {}),
    },
    { headers },
  );
  for await (const event of stream) {
    seen.events.push(event.type);
    if (event.type === "response.output_text.delta") seen.text.push(event.delta);
    if (event.type === "response.function_call_arguments.delta") {
      seen.tool_arguments += event.delta;
    }
    if (event.type === "response.completed" || event.type === "response.incomplete") {
      seen.finish_reason = event.response.status;
    }
  }
}

const routes = { chat, responses };
if (!(args.route in routes)) throw new Error(`--route ${args.route}: chat or responses`);
try {
  await routes[args.route]();
} catch (error) {
  seen.error = {
    name: error?.constructor?.name ?? typeof error,
    status: error?.status ?? null,
    code: error?.code ?? null, // an APIError's, from the error object
    type: error?.type ?? null,
    message: String(error?.message ?? error),
    cause: error?.cause ? String(error.cause.message ?? error.cause) : null,
  };
}
process.stdout.write(JSON.stringify(seen) + "\n");
