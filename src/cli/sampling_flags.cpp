#include "cli/sampling_flags.hpp"

#include <charconv>

#include "lockstep/error.hpp"

namespace lockstep::cli {

float f32_from_text(const std::string& text, const char* flag) {
  const char* begin = text.data() + (!text.empty() && text[0] == '+' ? 1 : 0);
  const char* end = text.data() + text.size();
  float value = 0.0f;
  const auto [stop, ec] = std::from_chars(begin, end, value);
  if (ec == std::errc::result_out_of_range)
    throw Error(ErrorKind::invalid_argument, std::string(flag) + ": " + text + " is out of the f32 range");
  if (ec != std::errc() || stop != end || begin == end)
    throw Error(ErrorKind::invalid_argument, std::string(flag) + ": '" + text + "' is not a number");
  return value;
}

void SamplingFlags::add_to(CLI::App& cmd) {
  cmd.add_option("-n,--tokens", tokens, "the most tokens to generate")->capture_default_str();
  cmd.add_option("--temperature", temperature, "0: greedy; higher: more varied")->type_name("FLOAT")->capture_default_str();
  cmd.add_option("--top-k", top_k, "sample among the k most likely bytes (0: all)")->capture_default_str();
  cmd.add_option("--top-p", top_p, "sample among the most likely bytes holding this mass (1: all)")->type_name("FLOAT")->capture_default_str();
  cmd.add_option("--seed", seed, "sampling seed: the same seed gives the same text")->capture_default_str();
  cmd.add_flag("--ignore-eos", ignore_eos, "go on past an end-of-sequence id (model.json's eos_token_ids) to --tokens");
}

GenerateOptions SamplingFlags::options() const {
  GenerateOptions g;
  g.sampling = {f32_from_text(temperature, "--temperature"), top_k, f32_from_text(top_p, "--top-p"), seed};
  g.max_tokens = tokens;
  g.truncate_prompt = true;
  g.ignore_eos = ignore_eos;
  return g;
}

}  // namespace lockstep::cli
