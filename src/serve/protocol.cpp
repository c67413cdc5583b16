#include "serve/protocol.hpp"

#include <nlohmann/json.hpp>

#include "lockstep/server.hpp"

namespace lockstep::serve {
namespace {

nlohmann::ordered_json specs_json(const std::vector<TensorSpec>& specs) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const TensorSpec& s : specs)
    list.push_back({{"name", s.name}, {"shape", s.shape}, {"dtype", s.dtype}});
  return list;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

std::string handshake_json(const Model& model, const CallLayout& layout, const std::string& replica) {
  const ModelSource& source = model.source();
  nlohmann::ordered_json j;
  j["protocol"] = protocol_version;
  j["checkpoint"] = source.directory;
  j["step"] = source.step ? nlohmann::ordered_json(*source.step) : nlohmann::ordered_json(nullptr);
  j["slug"] = source.slug ? nlohmann::ordered_json(*source.slug) : nlohmann::ordered_json(nullptr);
  j["precision"] = precision_name(model.precision());
  j["inputs"] = specs_json(layout.inputs());
  j["outputs"] = specs_json(layout.outputs());
  j["replica"] = replica;
  // Paths are bytes on Linux; a name that is not UTF-8 is carried with U+FFFD in its place.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string refusal_handshake_json(const std::string& error) {
  nlohmann::ordered_json j;
  j["protocol"] = protocol_version;
  j["error"] = error;
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string wrong_length_message(const CallLayout& layout, uint64_t got) {
  std::string inputs;
  for (size_t i = 0; i < layout.inputs().size(); ++i) {
    const TensorSpec& s = layout.inputs()[i];
    inputs += (i ? " + " : "") + s.name + " " + shape_text(s.shape) + " " + s.dtype;
  }
  return "a call frame holds " + std::to_string(layout.input_bytes()) + " bytes (" + inputs +
         "), this one announced " + std::to_string(got) + "; closing the connection";
}

}  // namespace lockstep::serve
