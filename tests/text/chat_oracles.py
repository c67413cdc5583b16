"""The two reference renderers of chat templates, for the chat-template tests:

- python3-jinja2 (Debian's), the engine transformers itself uses, in transformers' environment:
  ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols
  extension, raise_exception, and tojson as json.dumps(ensure_ascii=False); no strftime_now
  (lockstep leaves it undefined: no clock);
- the npm package @huggingface/jinja (pinned in tests/text/jinja_oracle/), run by node through
  jinja_oracle/render.js, installed here the way tests/text/oracle's tokenizers is.

Each render gives ("text", str) or ("error", message)."""
import json
import os
import subprocess

import npm_oracle

HERE = os.path.dirname(os.path.abspath(__file__))
JS_ORACLE = os.path.join(HERE, "jinja_oracle")
TEMPLATES = os.path.join(HERE, "chat_templates")

# The five published templates and the bos/eos tokens of their tokenizer_config.json
# (chat_templates/SOURCE.md).
MODELS = {
    "smollm2-instruct": ("<|im_start|>", "<|im_end|>"),
    "llama-3.2-instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "qwen2.5-instruct": ("", "<|im_end|>"),
    "tinyllama-chat-v1.0": ("<s>", "</s>"),
    "mistral-7b-instruct-v0.2": ("<s>", "</s>"),
    "mistral-nemo-instruct-2407": ("<s>", "</s>"),
}


def template_text(name):
    with open(os.path.join(TEMPLATES, name + ".jinja"), encoding="utf-8") as f:
        return f.read()


def jinja2_render(template, context):
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    try:
        return ("text", env.from_string(template).render(**context))
    except jinja2.exceptions.TemplateError as e:
        return ("error", str(e))


class JsOracle:
    """node running render.js: one request a line."""

    def __init__(self):
        self.proc = subprocess.Popen(["node", os.path.join(JS_ORACLE, "render.js")], cwd=JS_ORACLE,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8")

    def render(self, template, context):
        self.proc.stdin.write(json.dumps({"template": template, "context": context}) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        return ("text", answer["text"]) if "text" in answer else ("error", answer["error"])

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def js_oracle_or_skip():
    """A JsOracle, installing the pinned package first; skips, saying why, without node or npm."""
    npm_oracle.install_or_skip(JS_ORACLE, "@huggingface/jinja", "the @huggingface/jinja oracle")
    return JsOracle()
