"""lockstep's chat templates (include/lockstep/chat_template.hpp) against the two reference
renderers (chat_oracles.py): python3-jinja2 in transformers' environment and the npm package
@huggingface/jinja. For the published templates of SmolLM2-Instruct, Llama 3.2 Instruct,
Qwen2.5 Instruct, TinyLlama chat and Mistral Instruct (tests/text/chat_templates/, with their
source), and conversations with and without a system message, one and several turns, with and
without add_generation_prompt, lockstep's render is both oracles' byte for byte; where the
template refuses a conversation (Mistral v0.2 has no system role) all three refuse.
Then templates built to use each construct the interpreter has, and the refusal at load of a
template using what it lacks."""
import json

import pytest

import chat_oracles
from chat_oracles import MODELS, jinja2_render, template_text

lockstep = pytest.importorskip("lockstep")
if lockstep.extension_error is not None:
    pytest.skip("the lockstep module is not built: %s" % lockstep.extension_error, allow_module_level=True)

SYSTEM = {"role": "system", "content": "You are a helpful assistant"}
CONVERSATIONS = {
    "one-turn": [{"role": "user", "content": "Hello"}],
    "system": [SYSTEM, {"role": "user", "content": "Hello"}],
    "multi-turn": [SYSTEM, {"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there"},
                   {"role": "user", "content": "Who are you"}, {"role": "assistant", "content": "   I am an assistant   "},
                   {"role": "user", "content": "Another question"}],
    "no-system-multi-turn": [{"role": "user", "content": "  Bonjour, ça va ?\n"},
                             {"role": "assistant", "content": "Très bien. 日本語 \"quotes\" 'apostrophes' 🙂"},
                             {"role": "user", "content": "{{ not a tag }} {% neither %} </s> <|im_end|>"}],
}


@pytest.fixture(scope="module")
def js():
    oracle = chat_oracles.js_oracle_or_skip()
    yield oracle
    oracle.close()


def lockstep_render(template, context):
    try:
        return ("text", lockstep.ChatTemplate(template).render_context(json.dumps(context)))
    except ValueError as e:
        return ("error", str(e))


def same(ours, theirs):
    """Equal renders, or both refused (messages differ between engines)."""
    if ours[0] == "error" or theirs[0] == "error":
        return ours[0] == theirs[0]
    return ours == theirs


@pytest.mark.parametrize("model", sorted(MODELS))
def test_published_templates_render_as_both_oracles(model, js):
    template = template_text(model)
    bos, eos = MODELS[model]
    rendered = 0
    for name, messages in CONVERSATIONS.items():
        for gen in (False, True):
            # What lockstep's ChatTemplate.render passes (transformers' variables without tools).
            context = {"messages": messages, "add_generation_prompt": gen, "bos_token": bos, "eos_token": eos,
                       "tools": None, "documents": None}
            ours = lockstep.ChatTemplate(template, bos_token=bos, eos_token=eos)
            try:
                mine = ("text", ours.render(messages, add_generation_prompt=gen))
            except ValueError as e:
                mine = ("error", str(e))
            py = jinja2_render(template, context)
            node = js.render(template, context)
            assert same(mine, py), "%s %s gen=%s: lockstep %r, jinja2 %r" % (model, name, gen, mine, py)
            assert same(mine, node), "%s %s gen=%s: lockstep %r, @huggingface/jinja %r" % (model, name, gen, mine, node)
            rendered += mine[0] == "text"
    assert rendered >= 4, model  # most cases render (Mistral v0.2 refuses the system ones)


# Each construct the interpreter has, in a template of its own, against both oracles.
CONSTRUCTS = [
    "{{ 'a' ~ 1 ~ none ~ true }}|{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 - 4 }}",
    "{{ x | trim }}|{{ x | upper }}|{{ x | lower }}|{{ x | length }}|{{ missing | default('dflt') }}|{{ '' | default('e', true) }}",
    "{{ x.strip() }}|{{ x.lstrip() }}|{{ x.rstrip() }}|{{ x.split() }}|{{ 'a,b,,c'.split(',') }}|{{ x.replace('o', '0') }}",
    "{{ 'T' if x.startswith('  He') else 'F' }}{{ 'T' if x.endswith('d  ') else 'F' }} {{ 'Hello World'.title() }}",
    "{% for m in messages %}{{ loop.index }}/{{ loop.length }}{{ 'F' if loop.first }}{{ 'L' if loop.last }}{{ loop.revindex0 }};{% endfor %}",
    "{% for m in messages if m.role != 'system' %}{{ loop.index0 }}:{{ m.role }} {% else %}none{% endfor %}",
    "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% elif i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "{% set ns = namespace(n=0, s='') %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% set ns.s = ns.s + m.role[0] %}{% endfor %}{{ ns.n }} {{ ns.s }}",
    "{% set x = 1 %}{% for i in [1, 2] %}{% set x = i * 10 %}{{ x }}{% endfor %} {{ x }}",
    "{% macro turn(role, text='?') %}<{{ role }}>{{ text }}</{{ role }}>{% endmacro %}{{ turn('a') }}{{ turn('b', 'c') }}{{ turn(role='d', text='e') }}",
    "{{ messages | selectattr('role', 'equalto', 'user') | list | length }} {{ messages | map(attribute='role') | join(',') }}",
    "{{ messages[-1]['content'] }}|{{ messages[1:] | length }}|{{ 'abcdef'[1:4] }}|{{ 'abcdef'[::-1] }}|{{ 'abcdef'[:-1] }}",
    "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ d.items() | list }}|{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
    "{{ d.get('a') }} {{ d.get('zz', 'no') }} {{ 'T' if 'a' in d }}{{ 'T' if 'q' not in x }} {{ d.keys() | join(',') }} {{ d['b'][1] }}",
    "{% for v in [x is string, 1 is number, d is mapping, messages is iterable, none is none, missing is defined, "
    "4 is even, 3 is odd, 'abc'.startswith(('x', 'a'))] %}{{ 'T' if v else 'F' }}{% endfor %}",
    "{{ 'yes' if messages | length > 2 else 'no' }} {{ [1, 2] + [3] }} {{ 'ab' * 3 }} {{ (1, 2) | length }} {{ 1.5 + 1 }} {{ 10 / 4 }}",
    "  {%- if true %}\n    lead {{ 1 }}\n  {% endif %}\n{# comment #}\n  {% if true -%}\n   x\n{%- endif %}\n{{- ' y ' -}}\n z\n",
    "{% if not x is defined or x == '' %}E{% elif x is string and x | length > 3 %}L{% else %}S{% endif %}",
    "{{ messages | first | tojson }} {{ (messages | last).role }} {{ 'x' | capitalize }} {{ 3.0 }} {{ 1e20 }} {{ 0.1 + 0.2 }}",
]


# Where @huggingface/jinja differs from Jinja2 (it prints a list as JSON, not Python's repr; it
# has no `~ none`, no string repetition, no `(x | last).attr`): transformers' engine, jinja2, is
# the reference for these.
JS_PRINTS_OTHERWISE = {0, 2, 12, 15, 18}


@pytest.mark.parametrize("number", range(len(CONSTRUCTS)))
def test_constructs_render_as_both_oracles(number, js):
    template = CONSTRUCTS[number]
    context = {"messages": CONVERSATIONS["multi-turn"], "x": "  Hello World  ", "d": {"b": [1, "two", None], "a": 1.5,
                                                                                      "c": {"é": True}}}
    mine = lockstep_render(template, context)
    py = jinja2_render(template, context)
    assert mine == py, "template %r: lockstep %r, jinja2 %r" % (template, mine, py)
    node = js.render(template, context)
    if number in JS_PRINTS_OTHERWISE:
        # @huggingface/jinja prints None/True, floats and tojson's spacing its own way here;
        # transformers' engine (jinja2) is the reference for these.
        return
    assert mine == node, "template %r: lockstep %r, @huggingface/jinja %r" % (template, mine, node)


@pytest.mark.parametrize("template,construct", [
    ("{% filter upper %}x{% endfilter %}", "the tag {% filter %}"),
    ("line one\n{{ x | wordwrap }}", "line 2: the filter 'wordwrap'"),
    ("{{ x is sameas y }}", "the test 'sameas'"),
    ("{{ x.format(1) }}", "the method .format()"),
    ("{% generation %}x{% endgeneration %}", "the tag {% generation %}"),
    ("{% raw %}x{% endraw %}", "the tag {% raw %}"),
    ("{% if x %}", "{% endif %} is missing"),
    ("{{ x ", "never closed"),
    ("{% break %}", "outside a loop"),
    ("{% set a %}x{% endset %}", "as a block"),
])
def test_unknown_constructs_are_refused_at_load(template, construct):
    with pytest.raises(ValueError) as e:
        lockstep.ChatTemplate(template)
    assert construct in str(e.value)


def test_raise_exception_and_undefined_arithmetic_are_errors():
    t = lockstep.ChatTemplate("{{ raise_exception('no ' + messages[0].role) }}")
    with pytest.raises(ValueError, match="no user"):
        t.render([{"role": "user", "content": "x"}])
    with pytest.raises(ValueError, match="'nothing' is undefined"):
        lockstep.ChatTemplate("{{ nothing + 'x' }}").render([])
    # No clock: strftime_now is not defined, so Llama 3.2's template writes its fixed date.
    llama = lockstep.ChatTemplate(template_text("llama-3.2-instruct"), bos_token="<|begin_of_text|>")
    assert "Today Date: 26 Jul 2024" in llama.render([{"role": "user", "content": "hi"}])
