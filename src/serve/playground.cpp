// The playground page served at GET /, shipped as this source: self-contained HTML, CSS and
// script, no CDN, nothing from the internet.
#include "serve/playground.hpp"

namespace lockstep::serve {

std::string_view playground_html() {
  static constexpr std::string_view page = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>lockstep playground</title>
<style>
body { font-family: sans-serif; max-width: 60em; margin: 1em auto; padding: 0 1em; }
textarea { width: 100%; height: 6em; font-family: monospace; }
label { margin-right: 1em; white-space: nowrap; }
input[type=number] { width: 6em; }
#output { white-space: pre-wrap; font-family: monospace; border: 1px solid #ccc; padding: .5em; min-height: 4em; }
#output span.prompt { color: #666; }
#status { font-family: monospace; margin-top: .5em; }
</style>
</head>
<body>
<h1>lockstep playground</h1>
<p>Model: <span id="model">?</span>. The same prompt, seed and settings give the same bytes every time, on any machine.</p>
<textarea id="prompt">Once upon a time</textarea>
<div>
<label>max_tokens <input id="max_tokens" type="number" value="64" min="0"></label>
<label>temperature <input id="temperature" type="number" value="0.8" step="0.1" min="0"></label>
<label>top_p <input id="top_p" type="number" value="1" step="0.05" min="0" max="1"></label>
<label>top_k <input id="top_k" type="number" value="0" min="0"></label>
<label>seed <input id="seed" type="text" inputmode="numeric" value="1" size="20"></label>
<label>API key <input id="key" type="password" size="10"></label>
<button id="go">Generate</button>
</div>
<p>Text (each token tinted by its probability: white is certain, pink unlikely):</p>
<div id="output"></div>
<div id="status"></div>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
fetch("/v1/models").then(r => r.json()).then(j => { if (j.data) $("model").textContent = j.data[0].id; }).catch(() => {});
// White for a certain token, down to a light pink for the least likely: black text stays easy to
// read on every tint (at least 9:1 contrast; pure red was 5:1).
function tint(logprob) {
  const p = Math.exp(logprob);
  const g = 135 + Math.round(120 * p);
  return "rgb(255," + g + "," + g + ")";
}
// The seed as typed, checked as an integer in [0, 2^64 - 1]. It is sent as those digits: a
// JavaScript number holds integers exactly only up to 2^53, so Number() would round a larger
// seed to another request's (and JSON.stringify of 2^64 - 1 gives 2^64, which the API refuses).
function seedDigits() {
  const text = $("seed").value.trim();
  if (!/^[0-9]+$/.test(text) || BigInt(text) > 18446744073709551615n)
    throw new Error("the seed must be an integer in [0, 18446744073709551615]");
  return BigInt(text).toString();
}
async function generate() {
  const out = $("output"), status = $("status");
  out.textContent = "";
  status.textContent = "generating...";
  const promptSpan = document.createElement("span");
  promptSpan.className = "prompt";
  promptSpan.textContent = $("prompt").value;
  out.appendChild(promptSpan);
  const fields = {
    prompt: $("prompt").value, max_tokens: Number($("max_tokens").value),
    temperature: Number($("temperature").value), top_p: Number($("top_p").value),
    top_k: Number($("top_k").value), logprobs: 0, stream: true,
  };
  const body = JSON.stringify(fields).slice(0, -1) + ',"seed":' + seedDigits() + "}";
  const headers = { "Content-Type": "application/json" };
  if ($("key").value) headers["Authorization"] = "Bearer " + $("key").value;
  // A stream that breaks off (a replica died behind the balancer) is resumed exactly: the same
  // request (same seed) is sent again and the text already shown is skipped as it repeats.
  const shown = { text: "" };  // the generated text on the page, grown by every attempt
  let resumes = 0;
  for (let attempt = 0; ; ++attempt) {
    const result = await stream(body, headers, out, status, shown).catch(e => ({ lost: String(e) }));
    if (result.error) { status.textContent = result.error; return; }
    if (!result.lost) break;
    if (attempt >= 5) { status.textContent = "error: the stream was lost 6 times: " + result.lost; return; }
    ++resumes;
    status.dataset.resumes = String(resumes);
    status.dataset.resumedAfter = (status.dataset.resumedAfter ? status.dataset.resumedAfter + "," : "") +
      shown.text.length;
    status.textContent = "connection lost (" + result.lost + "); resuming after " + shown.text.length +
      " characters...";
    await new Promise(r => setTimeout(r, 200 * (attempt + 1)));
  }
  out.dataset.generated = shown.text;
}
// One attempt: appends to `out` (and shown.text) the text past what is shown; returns {} when
// the stream ended with [DONE], {lost} when it broke off, {error} for an answer not to retry.
async function stream(body, headers, out, status, shown) {
  const delivered = shown.text;
  const response = await fetch("/v1/completions", { method: "POST", headers, body });
  if (!response.ok) {
    const e = await response.json().catch(() => ({}));
    const text = "error " + response.status + ": " + (e.error ? e.error.message : "");
    return [429, 502, 503, 504].includes(response.status) ? { lost: text } : { error: text };
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "", received = "", pending = null;
  for (;;) {
    let chunkRead;
    try { chunkRead = await reader.read(); } catch (e) { return { lost: String(e) }; }
    if (chunkRead.done) return { lost: "the stream ended early" };
    buffer += decoder.decode(chunkRead.value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      if (!event.startsWith("data: ")) continue;
      const data = event.slice(6);
      if (data === "[DONE]") return {};
      const chunk = JSON.parse(data);
      // The choice's seed as its digits (JSON.parse would round one past 2^53): the first "seed"
      // of the event, the choice's, since the server writes object keys in sorted order.
      const seed = (/"seed":([0-9]+)/.exec(data) || [, "?"])[1];
      const choice = chunk.choices[0];
      if (choice.logprobs && choice.logprobs.token_logprobs.length) {
        const lp = choice.logprobs.token_logprobs[0];
        pending = pending === null ? lp : Math.min(pending, lp);
      }
      if (choice.text) {
        const before = received.length;
        received += choice.text;
        const overlap = Math.min(received.length, delivered.length);
        if (received.slice(before, overlap) !== delivered.slice(before, overlap))
          return { error: "error: the resumed stream differs from the text shown (do the replicas serve one model?)" };
        if (received.length > shown.text.length) {
          const text = received.slice(shown.text.length);
          const span = document.createElement("span");
          span.textContent = text;
          span.style.background = tint(pending === null ? 0 : pending);
          span.title = "logprob " + (pending === null ? "?" : pending.toFixed(4));
          out.appendChild(span);
          shown.text += text;
        }
        pending = null;
      }
      if (choice.finish_reason === "abort") return { lost: "the server stopped the generation" };
      if (choice.finish_reason) {
        status.textContent = "finish_reason " + choice.finish_reason + ", seed " + seed +
          ", SHA-256 of the generated bytes " + choice.sha256;
        status.dataset.sha256 = choice.sha256;
      }
    }
  }
}
$("go").addEventListener("click", () => { generate().catch(e => { $("status").textContent = "error: " + e; }); });
</script>
</body>
</html>
)HTML";
  return page;
}

}  // namespace lockstep::serve
