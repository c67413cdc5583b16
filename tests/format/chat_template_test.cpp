// Chat templates (include/lockstep/chat_template.hpp) without Python, so that the sanitizer
// builds run the interpreter too: the published templates of tests/text/chat_templates/ render a
// conversation to the text python3-jinja2 gives in transformers' environment (written here from
// its render; tests/text/test_chat_template.py compares against it and @huggingface/jinja live),
// a template refuses a conversation through raise_exception, unknown constructs and runaway
// templates are refused, and the reference cycles macros and namespaces make are freed.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "lockstep/chat_template.hpp"
#include "lockstep/error.hpp"

namespace lockstep {
namespace {

std::string template_file(const std::string& name) {
  std::ifstream in(std::string(LOCKSTEP_SOURCE_DIR) + "/tests/text/chat_templates/" + name + ".jinja", std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Published {
  const char* name;
  const char* bos;
  const char* eos;
  bool no_system;  // the template refuses a system message
  const char* rendered;
};

const Published kPublished[] = {
    {"llama-3.2-instruct", "<|begin_of_text|>", "<|eot_id|>", false,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are you?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"mistral-7b-instruct-v0.2", "<s>", "</s>", true,
     "<s>[INST] Hello [/INST] Hi there </s>[INST] Who are you? [/INST]"},
    {"mistral-nemo-instruct-2407", "<s>", "</s>", false,
     "<s>[INST]Hello[/INST] Hi there </s>[INST]Be brief.\n\nWho are you?[/INST]"},
    {"qwen2.5-instruct", "", "<|im_end|>", false,
     "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n Hi there <|im_end|>\n<|im_start|>user\nWho are you?<|im_end|>\n<|im_start|>assistant\n"},
    {"smollm2-instruct", "<|im_start|>", "<|im_end|>", false,
     "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n Hi there <|im_end|>\n<|im_start|>user\nWho are you?<|im_end|>\n<|im_start|>assistant\n"},
    {"tinyllama-chat-v1.0", "<s>", "</s>", false,
     "<|system|>\nBe brief.</s>\n<|user|>\nHello</s>\n<|assistant|>\n Hi there </s>\n<|user|>\nWho are you?</s>\n<|assistant|>\n"},
};

TEST(ChatTemplate, PublishedTemplatesRenderAsJinja2) {
  const std::vector<ChatMessage> with_system = {
      {"system", "Be brief."}, {"user", "Hello"}, {"assistant", " Hi there "}, {"user", "Who are you?"}};
  const std::vector<ChatMessage> without(with_system.begin() + 1, with_system.end());
  for (const Published& p : kPublished) {
    const ChatTemplate t(template_file(p.name), p.bos, p.eos, p.name);
    EXPECT_EQ(t.render(p.no_system ? without : with_system, true), p.rendered) << p.name;
    if (p.no_system) {
      EXPECT_THROW((void)t.render(with_system, true), Error) << p.name;  // raise_exception
    }
  }
}

TEST(ChatTemplate, BuiltinIsTheHttpApisPlainText) {
  const std::vector<ChatMessage> m = {{"system", "S"}, {"user", "U"}};
  EXPECT_EQ(ChatTemplate::builtin().render(m, true), "system: S\nuser: U\nassistant:");
  EXPECT_EQ(ChatTemplate::builtin().render(m, false), "system: S\nuser: U\n");
  EXPECT_THROW((void)ChatTemplate::builtin().render(std::vector<ChatMessage>{{"tool", "x"}}, true), Error);
}

TEST(ChatTemplate, RefusesUnknownConstructsAndRunawayTemplates) {
  for (const char* bad : {"{% filter upper %}x{% endfilter %}", "{{ x | wordwrap }}", "{{ x is sameas y }}",
                          "{{ x.format(1) }}", "{% if x %}", "{{ x ", "{% break %}", "{{ 'unclosed }}"}) {
    EXPECT_THROW(ChatTemplate(bad, "", ""), Error) << bad;
  }
  const std::string deep = "{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}";
  EXPECT_THROW(ChatTemplate(deep, "", ""), Error);
  const ChatTemplate forever("{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}", "", "");
  EXPECT_THROW((void)forever.render(std::vector<ChatMessage>{}, true), Error);
  const ChatTemplate doubling(
      "{% set ns = namespace(x=[1]) %}{% for i in range(40) %}{% set ns.x = ns.x + ns.x %}{% endfor %}", "", "");
  EXPECT_THROW((void)doubling.render(std::vector<ChatMessage>{}, true), Error);
}

// A macro is stored in the scope it holds, and `set ns.x` can put a namespace inside itself: the
// reference cycles a render makes are broken when it ends. Without the sanitizers this checks the
// text; the ASan stage's LeakSanitizer fails it if a cycle outlives the render (as the fuzz stage
// found one did: every template that defined a macro leaked its scopes, a server's on each request).
TEST(ChatTemplate, MacrosAndNamespacesThatReferToThemselvesAreFreed) {
  const std::vector<ChatMessage> m = {{"user", "U"}};
  const std::pair<const char*, const char*> cases[] = {
      {"{% macro turn(r) %}<{{ r }}>{% endmacro %}{% for x in messages %}{{ turn(x.role) }}{% endfor %}", "<user>"},
      {"{% set ns = namespace(a=1) %}{% set ns.self = ns %}{% set ns.list = [ns, [ns]] %}{{ ns.self.self.a }}", "1"},
      {"{% set ns = namespace() %}{% macro m() %}{{ ns.v }}{% endmacro %}{% set ns.f = m %}{% set ns.v = 7 %}{% set g = ns.f %}{{ g() }}",
       "7"},
      {"{% for i in range(3) %}{% macro inner() %}{{ i }}{% endmacro %}{{ inner() }}{% endfor %}", "012"},
      {"{% macro outer() %}{% macro inner() %}i{% endmacro %}{{ inner() }}{% endmacro %}{{ outer() }}{{ outer() }}", "ii"},
  };
  for (const auto& [source, rendered] : cases) {
    EXPECT_EQ(ChatTemplate(source, "", "").render(m, false), rendered) << source;
  }
  // A render that fails part-way frees its cycles as well.
  const ChatTemplate failing(
      "{% set ns = namespace() %}{% set ns.n = ns %}{% macro m() %}{% endmacro %}{{ raise_exception('no') }}", "", "");
  EXPECT_THROW((void)failing.render(m, false), Error);
}

}  // namespace
}  // namespace lockstep
