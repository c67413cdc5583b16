// GET /v1/models and /v1/models/{id} (OpenAI's model objects, with the window as vLLM's
// max_model_len), and vLLM's tokenizer endpoints: POST /tokenize, POST /detokenize, GET
// /tokenizer_info (their bodies are parsed in http_api.cpp).
#include "serve/http_session.hpp"
#include "serve/http_wire.hpp"

namespace lockstep::serve {

using nlohmann::json;

json HttpSession::model_object() const {
  const ModelConfig& config = context_.model->config();
  return {{"id", context_.model_name},
          {"object", "model"},
          {"created", 0},
          {"owned_by", "lockstep"},
          {"parameters_sha256", context_.model->parameters_sha256()},
          {"profile", context_.model->profile()},
          {"window", config.length},
          {"max_model_len", config.length},  // vLLM's name for it, which its clients read
          {"vocab_size", config.vocab_size},
          {"tokenizer", context_.tokenizer ? context_.tokenizer->type() : bytes_model() ? "bytes" : "none"}};
}

void HttpSession::answer_models() {
  respond(200, "application/json", json_body(json{{"object", "list"}, {"data", json::array({model_object()})}}));
}

void HttpSession::answer_model(const std::string& id) {
  if (id != context_.model_name)
    return respond_error(404, "the model '" + id + "' is not served here; this server serves '" + context_.model_name + "'",
                         "model", "invalid_request_error", "model_not_found");
  respond(200, "application/json", json_body(model_object()));
}

void HttpSession::answer_tokenizer(const std::string& path) {
  const Tokenizer* tokenizer = context_.tokenizer.get();
  const ModelConfig& config = context_.model->config();
  if (path == "/tokenizer_info") return respond(200, "application/json", json_body(tokenizer_info(config, tokenizer)));
  if (path == "/tokenize")
    return respond(200, "application/json",
                   json_body(tokenize_answer(request_.body(), config, context_.model_name, tokenizer,
                                             context_.chat_template.get())));
  respond(200, "application/json", json_body(detokenize_answer(request_.body(), config, context_.model_name, tokenizer)));
}

}  // namespace lockstep::serve
