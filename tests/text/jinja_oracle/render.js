// Renders chat templates with Hugging Face's @huggingface/jinja (the engine of transformers.js),
// for tests/text/test_chat_template.py. Reads one JSON request a line on stdin,
// {"template": "...", "context": {...}}, and writes one JSON answer a line:
// {"text": "..."} or {"error": "..."}.
//
// The package defines strftime_now (today's date) among its globals; lockstep leaves it
// undefined so that a render never depends on the clock, so here the global is never set (the
// package declares each global through Environment.set, and a second declaration is an error).
"use strict";
const { Environment, Template } = require("@huggingface/jinja");
const readline = require("readline");

const declare = Environment.prototype.set;
Environment.prototype.set = function (name, value) {
  if (name === "strftime_now") return undefined;
  return declare.call(this, name, value);
};

const rl = readline.createInterface({ input: process.stdin, terminal: false });
rl.on("line", (line) => {
  if (!line.trim()) return;
  const req = JSON.parse(line);
  let answer;
  try {
    answer = { text: new Template(req.template).render(req.context) };
  } catch (e) {
    answer = { error: String(e && e.message ? e.message : e) };
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
});
