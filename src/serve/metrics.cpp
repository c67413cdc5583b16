#include "serve/metrics.hpp"

#include <cstdio>
#include <string_view>

namespace lockstep::serve {
namespace {

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// A label value with \, " and newline escaped as the exposition format wants.
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// `text` with `name="value"` added as the first label of every sample line (comments untouched).
std::string with_label(const std::string& text, const std::string& name, const std::string& value) {
  const std::string pair = name + "=\"" + label(value) + "\"";
  std::string out;
  out.reserve(text.size() + 64 * pair.size());
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + begin, end - begin);
    if (line.empty() || line[0] == '#') {
      out += line;
    } else {
      const size_t metric_end = line.find_first_of("{ ");
      out += line.substr(0, metric_end);
      if (metric_end != std::string_view::npos && line[metric_end] == '{')
        out += "{" + pair + (line.size() > metric_end + 1 && line[metric_end + 1] == '}' ? "" : ",") +
               std::string(line.substr(metric_end + 1));
      else
        out += "{" + pair + "}" + std::string(metric_end == std::string_view::npos ? "" : line.substr(metric_end));
    }
    out += '\n';
    begin = end + 1;
  }
  return out;
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  std::lock_guard lock(mutex_);
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

std::string Histogram::text(const std::string& name) const {
  std::lock_guard lock(mutex_);
  std::string out;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{le=\"" + number(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  cumulative += counts_.back();
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
  out += name + "_sum " + number(sum_) + "\n";
  out += name + "_count " + std::to_string(count_) + "\n";
  return out;
}

Metrics::Metrics()
    : batch_size({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}),
      time_to_first_token({0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}),
      time_per_token({0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1}),
      generation_length({1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000}) {}

void Metrics::count_finished(Finish finish) {
  finished_[static_cast<size_t>(finish)].fetch_add(1, std::memory_order_relaxed);
}

uint64_t Metrics::generations_ended() const {
  uint64_t n = 0;
  for (const auto& f : finished_) n += f.load(std::memory_order_relaxed);
  return n;
}

uint64_t Metrics::requests_answered() const {
  std::lock_guard lock(mutex_);
  uint64_t n = 0;
  for (const auto& [key, count] : requests_) n += count;
  return n;
}

void Metrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard lock(mutex_);
  ++requests_[{endpoint, status}];
}

std::string Metrics::text(const std::string& replica, const std::string& model_name, const std::string& profile, const std::string& sha256,
                          uint64_t rows_reused, uint64_t rows_computed) const {
  std::string out;
  out += "# HELP lockstep_model_info The served model.\n# TYPE lockstep_model_info gauge\n";
  out += "lockstep_model_info{model_name=\"" + label(model_name) + "\",profile=\"" + label(profile) +
         "\",parameters_sha256=\"" + label(sha256) + "\"} 1\n";
  out += "# HELP lockstep_http_requests_total HTTP requests answered, by endpoint and status.\n";
  out += "# TYPE lockstep_http_requests_total counter\n";
  {
    std::lock_guard lock(mutex_);
    for (const auto& [key, n] : requests_)
      out += "lockstep_http_requests_total{endpoint=\"" + label(key.first) + "\",status=\"" +
             std::to_string(key.second) + "\"} " + std::to_string(n) + "\n";
  }
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name + " " +
           std::to_string(v) + "\n";
  };
  auto gauge = [&](const char* name, const char* help, int64_t v) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " gauge\n" + name + " " +
           std::to_string(v) + "\n";
  };
  counter("lockstep_prompt_tokens_total", "Prompt tokens of the generations admitted.", prompt_tokens.load());
  counter("lockstep_generation_tokens_total", "Tokens generated.", generation_tokens.load());
  gauge("lockstep_num_requests_waiting", "Generations queued, not yet decoding.", waiting.load());
  gauge("lockstep_num_requests_running", "Generations in the decoding batch.", running.load());
  counter("lockstep_prefix_cache_rows_reused_total",
          "Rows the prefix cache supplied (frame protocol calls and HTTP generations' prompts).", rows_reused);
  counter("lockstep_prefix_cache_rows_computed_total",
          "Rows the model computed (frame protocol calls and HTTP generations).", rows_computed);
  // Generations that ended as asked (length, stop, eos) count as successes, vLLM's name for them; those
  // cut short (abort: the client left or the drain ran out; error) as failures, so that a success
  // counter never counts a failure.
  const auto ends = [&](const char* name, const char* help, bool successes) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n";
    for (size_t i = 0; i < finished_.size(); ++i) {
      const auto f = static_cast<Finish>(i);
      if ((f == Finish::length || f == Finish::stop || f == Finish::eos) != successes) continue;
      out += std::string(name) + "{finished_reason=\"" + finish_label(f) + "\"} " + std::to_string(finished_[i].load()) + "\n";
    }
  };
  ends("lockstep_request_success_total", "Generations (one per choice) that ended as asked, by finish reason.", true);
  ends("lockstep_request_failure_total", "Generations (one per choice) cut short (abort) or failed (error).", false);
  auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " histogram\n" + h.text(name);
  };
  histogram("lockstep_batch_size", "Generations decoded together in one batched step.", batch_size);
  histogram("lockstep_time_to_first_token_seconds", "From admission to the first generated token.",
            time_to_first_token);
  histogram("lockstep_time_per_output_token_seconds", "Between consecutive tokens of one generation.",
            time_per_token);
  histogram("lockstep_request_generation_tokens", "Tokens each generation (one per choice) ended with.",
            generation_length);
  return with_label(out, "replica", replica);
}

}  // namespace lockstep::serve
