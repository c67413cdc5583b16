// Chat templates for the Python API (chat.cpp): lockstep.ChatTemplate, and the conversion of a
// Python conversation (a list of dicts) to the JSON the template renders.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "lockstep/chat_template.hpp"
#include "text.hpp"

namespace lockstep::python {

namespace py = pybind11;

// `messages` (a list or tuple of dicts) as a JSON array; TypeError for anything else.
std::string messages_json(py::handle messages);

// lockstep.ChatTemplate.
void bind_chat_template(py::module_& m);

}  // namespace lockstep::python
