// lockstep.ChatTemplate: a chat template (include/lockstep/chat_template.hpp) read from its
// source, rendered with a conversation given as Python lists and dicts (through JSON, so every
// field a template reads passes as it is).
#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "arg_types.hpp"
#include "chat.hpp"

namespace lockstep::python {

std::string messages_json(py::handle messages) {
  if (!py::isinstance<py::list>(messages) && !py::isinstance<py::tuple>(messages))
    throw py::type_error("messages must be a list of dicts");
  for (py::handle m : messages)
    if (!py::isinstance<py::dict>(m)) throw py::type_error("messages must be a list of dicts");
  return py::module_::import("json").attr("dumps")(messages, py::arg("ensure_ascii") = false).cast<std::string>();
}

void bind_chat_template(py::module_& m) {
  py::class_<ChatTemplate, std::shared_ptr<ChatTemplate>>(m, "ChatTemplate", R"doc(
A chat template (Jinja) as lockstep renders it: transformers' environment (trim_blocks,
lstrip_blocks, loop controls, raise_exception), no clock (strftime_now is not defined). A
template using a tag, filter, test or method lockstep lacks is refused here (ValueError naming it
and its line). LanguageModelInference.chat_template gives the model's own.
)doc")
      .def(py::init([](const std::string& source, const std::string& bos_token, const std::string& eos_token) {
             return std::make_shared<ChatTemplate>(source, bos_token, eos_token);
           }),
           py::arg("source"), py::kw_only(), py::arg("bos_token") = "", py::arg("eos_token") = "")
      .def(
          "render",
          [](const ChatTemplate& self, MessagesArg messages, bool add_generation_prompt) {
            const std::string json = messages_json(messages);
            std::string out;
            {
              py::gil_scoped_release release;
              out = self.render_json(json, add_generation_prompt);
            }
            return decoded_str(out);
          },
          py::arg("messages"), py::kw_only(), py::arg("add_generation_prompt") = false,
          "The prompt text of `messages` (a list of dicts: role, content, ...), with bos_token, eos_token,\n"
          "add_generation_prompt, and tools and documents as None.")
      .def(
          "render_context",
          [](const ChatTemplate& self, const std::string& context_json) {
            return decoded_str(self.render_context(context_json));
          },
          py::arg("context_json"), "The template rendered with exactly the variables of a JSON object.")
      .def_property_readonly("source", [](const ChatTemplate& self) { return self.source(); })
      .def_property_readonly("bos_token", [](const ChatTemplate& self) { return self.bos_token(); })
      .def_property_readonly("eos_token", [](const ChatTemplate& self) { return self.eos_token(); });
}

}  // namespace lockstep::python
