// libFuzzer target for chat templates (text/jinja_*.cpp, include/lockstep/chat_template.hpp): the
// input is a template's source, read and checked, then rendered over a small conversation. A
// refusal (lockstep::Error) is a correct answer; a crash, a sanitizer report, a hang or memory
// past libFuzzer's limit is a bug (nesting, steps and sizes are bounded).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "lockstep/chat_template.hpp"
#include "lockstep/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  try {
    const lockstep::ChatTemplate t(source, "<s>", "</s>");
    const lockstep::ChatMessage messages[] = {
        {"system", "Be brief."}, {"user", "Hello"}, {"assistant", " Hi there "}, {"user", "Who are you?"}};
    (void)t.render(messages, true);
    (void)t.render_json(R"([{"role": "user", "content": "x", "tool_calls": [{"id": "abc", "n": 1.5}]}])", false);
  } catch (const lockstep::Error&) {
  }
  return 0;
}
