// Drives llmproxy with the official openai client for Node.js, as a
// tenant's application would: node openai_client.mjs BASE_URL MODE MODEL [N]
// with MODE one (a chat completion), stream (the same, streamed) or burst
// (N chat completions at once). The tenant is in the TENANT variable.
// Prints one JSON array: per call its HTTP status and the text it got.
import OpenAI from "openai";

const [, , baseURL, mode, model, n] = process.argv;
const client = new OpenAI({
  baseURL,
  apiKey: "test",
  maxRetries: 0, // a 429 is the answer under test, not something to retry
  defaultHeaders: { "X-Tenant": process.env.TENANT },
});

async function one(stream) {
  const messages = [{ role: "user", content: "hi" }];
  try {
    if (stream) {
      const s = await client.chat.completions.create({ model, messages, stream: true });
      let text = "";
      for await (const chunk of s) text += chunk.choices[0]?.delta?.content ?? "";
      return { status: 200, text };
    }
    const r = await client.chat.completions.create({ model, messages });
    return { status: 200, text: r.choices[0].message.content };
  } catch (e) {
    if (e instanceof OpenAI.APIError && e.status) return { status: e.status };
    throw e;
  }
}

const calls = mode === "burst" ? Number(n) : 1;
const out = await Promise.all(Array.from({ length: calls }, () => one(mode === "stream")));
console.log(JSON.stringify(out));
