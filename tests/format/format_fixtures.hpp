// Helpers for the format tests: valid model directories to start from, a safetensors file split
// into its header and data so that a test can edit one and put the file back together, and the
// message of a refused load.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "lockstep/config.hpp"
#include "lockstep/error.hpp"

namespace lockstep::test {

// Writes a model directory at `dir` from init_parameters(config, seed); returns the parameters.
std::vector<float> write_init_model(const std::string& dir, const ModelConfig& config,
                                    uint64_t seed = 7);

// A safetensors file: [u64 LE header length N][N bytes of JSON][data].
struct SafetensorsFile {
  std::string header_text;  // the N bytes, padding included
  std::string data;
  // The header parsed in file order (nlohmann's ordered_json keeps the key order).
  nlohmann::ordered_json header() const;
};
SafetensorsFile split_safetensors(const std::string& bytes);
// Header length + header + data; the header is padded with spaces so the data is 64-byte aligned.
std::string join_safetensors(const std::string& header_text, const std::string& data);
std::string join_safetensors_json(const nlohmann::ordered_json& header, const std::string& data);

// Reads DIR/params.safetensors, lets `edit` change its header and data, writes it back.
void edit_safetensors(const std::string& dir,
                      const std::function<void(nlohmann::ordered_json&, std::string&)>& edit);
// Reads DIR/model.json, lets `edit` change it, writes it back.
void edit_model_json(const std::string& dir, const std::function<void(nlohmann::ordered_json&)>& edit);

// Loads `path` expecting lockstep::Error; the refusal's kind and message, or a failure.
struct Refusal {
  bool thrown = false;
  ErrorKind kind = ErrorKind::internal;
  std::string message;
};
Refusal load_refusal(const std::string& path, bool trained = false);

// `text` contains every one of `parts`.
::testing::AssertionResult HasAll(const std::string& text, const std::vector<std::string>& parts);

// Names in `dir` (without . and ..), sorted.
std::vector<std::string> list_directory(const std::string& dir);

}  // namespace lockstep::test
