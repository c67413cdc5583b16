#include "lockstep/call.hpp"

#include "core/fpenv.hpp"
#include "model/prefix_cache_impl.hpp"

#include <bit>
#include <cstring>

namespace lockstep {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the protocol's tensors are little-endian and lockstep copies them as they are");

int64_t elements(const TensorSpec& s) {
  int64_t n = 1;
  for (int64_t d : s.shape) n *= d;
  return n;
}

std::string names_of(const std::vector<TensorSpec>& specs) {
  std::string s;
  for (size_t i = 0; i < specs.size(); ++i) s += (i ? ", " : "") + specs[i].name;
  return s;
}

}  // namespace

CallLayout::CallLayout(const ModelConfig& config, std::vector<std::string> outputs, bool at)
    : config_(config), at_(at) {
  inputs_ = model_inputs(config);
  if (at) inputs_.push_back({"at", {1}, "i32"});
  const std::vector<TensorSpec> all = model_outputs(config);
  if (outputs.empty())
    for (const auto& s : all) outputs.push_back(s.name);
  for (const std::string& name : outputs) {
    const TensorSpec* found = nullptr;
    for (const auto& s : all)
      if (s.name == name) found = &s;
    if (!found)
      throw Error(ErrorKind::invalid_argument,
                  "unknown output '" + name + "'; the model's outputs are " + names_of(all));
    for (const auto& s : outputs_)
      if (s.name == name) throw Error(ErrorKind::invalid_argument, "output '" + name + "' is asked for twice");
    TensorSpec spec = *found;
    if (at) spec.shape[1] = 1;
    if (name == "logits") logits_index_ = static_cast<int>(outputs_.size());
    if (name == "hidden") hidden_index_ = static_cast<int>(outputs_.size());
    outputs_.push_back(spec);
  }
  for (const auto& s : inputs_) input_bytes_ += static_cast<size_t>(elements(s)) * 4;
  for (const auto& s : outputs_) output_bytes_ += static_cast<size_t>(elements(s)) * 4;
}

int64_t CallLayout::logits_offset() const {
  if (logits_index_ < 0) return -1;
  int64_t off = 0;
  for (int i = 0; i < logits_index_; ++i) off += elements(outputs_[static_cast<size_t>(i)]) * 4;
  return off;
}

int64_t CallLayout::hidden_offset() const {
  if (hidden_index_ < 0) return -1;
  int64_t off = 0;
  for (int i = 0; i < hidden_index_; ++i) off += elements(outputs_[static_cast<size_t>(i)]) * 4;
  return off;
}

namespace {

// The calls' rows through the prefix cache: each reuses the longest cached prefix that ends
// before its first output, computes the rest in one forward pass with the others, and is then
// cached itself.
CallStats forward_with_cache(const Model& model, std::span<const RowRequest> rows, const CallOptions& options,
                             PrefixCache& cache) {
  const Model::Impl& m = model.impl();
  PrefixCache::Impl& c = cache.impl();
  std::vector<std::unique_ptr<KvCache>> kv(rows.size());
  std::vector<RowWork> work(rows.size());
  uint64_t computed = 0, reused = 0;
  {
    std::lock_guard lock(c.mutex);
    for (size_t i = 0; i < rows.size(); ++i) {
      const RowRequest& r = rows[i];
      const auto [entry, length] = c.find(r.ids, r.out_begin);
      int32_t start = 0;
      if (entry) {
        start = length;
        // A prefix the call covers whole moves out of the cache (this call's entry replaces it);
        // a longer entry lends a copy of its first positions.
        if (static_cast<int32_t>(entry->tokens.size()) == length) {
          kv[i] = c.take(entry);
        } else {
          kv[i] = c.acquire(entry);  // never evicts `entry` itself
          kv[i]->copy_from(*entry->kv, length);
        }
      } else {
        kv[i] = c.acquire(nullptr);
      }
      work[i] = {r.ids.subspan(0, static_cast<size_t>(r.out_end)), start, r.out_begin, r.out_end, r.logits, r.hidden, kv[i].get()};
      computed += static_cast<uint64_t>(r.out_end - start);
      reused += static_cast<uint64_t>(start);
    }
  }
  {
    FloatEnvScope env;
    forward_fast(m, work, m.threads_for(options), options.threads.has_value());
  }
  std::lock_guard lock(c.mutex);
  for (size_t i = 0; i < rows.size(); ++i) c.insert(work[i].ids, std::move(kv[i]));
  c.stats.rows_computed += computed;
  c.stats.rows_reused += reused;
  return {computed, reused};
}

}  // namespace

std::vector<CallResult> run_calls(const Model& model, const CallLayout& layout,
                                  std::span<const std::span<const uint8_t>> inputs,
                                  std::span<const std::span<uint8_t>> outputs,
                                  const CallOptions& options, PrefixCache* cache, CallStats* stats) {
  if (cache && &cache->model() != &model)
    throw Error(ErrorKind::invalid_argument, "the prefix cache belongs to another model");
  const ModelConfig& c = model.config();
  const int32_t T = c.length;
  std::vector<CallResult> results(inputs.size());
  std::vector<std::vector<int32_t>> ids(inputs.size());
  std::vector<RowRequest> rows;
  std::vector<size_t> row_call;
  for (size_t i = 0; i < inputs.size(); ++i) {
    CallResult& res = results[i];
    if (inputs[i].size() != layout.input_bytes()) {
      res.error = "a call holds " + std::to_string(layout.input_bytes()) + " bytes of input, got " +
                  std::to_string(inputs[i].size());
      continue;
    }
    if (outputs.size() != inputs.size() || outputs[i].size() != layout.output_bytes()) {
      res.error = "output buffer of the wrong size";
      continue;
    }
    ids[i].resize(static_cast<size_t>(T));
    std::memcpy(ids[i].data(), inputs[i].data(), static_cast<size_t>(T) * 4);
    int32_t at = T - 1;
    if (layout.at()) {
      std::memcpy(&at, inputs[i].data() + static_cast<size_t>(T) * 4, 4);
      if (at < 0 || at >= T) {
        res.error = "at = " + std::to_string(at) + " is outside the window [0, " + std::to_string(T) + ")";
        continue;
      }
    }
    const int32_t last = at;  // no position after the last output is computed
    bool ids_ok = true;
    for (int32_t t = 0; t <= last; ++t) {
      const int32_t id = ids[i][static_cast<size_t>(t)];
      if (id < 0 || id >= c.vocab_size) {
        res.error = "inputs must be token ids in [0, " + std::to_string(c.vocab_size) + "); got " +
                    std::to_string(id) + " at position " + std::to_string(t);
        ids_ok = false;
        break;
      }
    }
    if (!ids_ok) continue;
    RowRequest row;
    row.ids = {ids[i].data(), static_cast<size_t>(last + 1)};
    row.out_begin = layout.at() ? at : 0;
    row.out_end = last + 1;
    if (layout.wants_logits())
      row.logits = reinterpret_cast<float*>(outputs[i].data() + layout.logits_offset());
    if (layout.wants_hidden())
      row.hidden = reinterpret_cast<float*>(outputs[i].data() + layout.hidden_offset());
    rows.push_back(row);
    row_call.push_back(i);
  }
  const Device device = options.device.value_or(model.default_device());
  CallStats counted;
  if (!rows.empty()) {
    if (cache && device == Device::cpu) {
      counted = forward_with_cache(model, rows, options, *cache);
    } else {
      model.forward(rows, options);
      for (const RowRequest& r : rows) counted.rows_computed += static_cast<uint64_t>(r.out_end);
    }
  }
  if (stats) {
    stats->rows_computed += counted.rows_computed;
    stats->rows_reused += counted.rows_reused;
  }
  for (size_t i : row_call) results[i].ok = true;
  return results;
}

}  // namespace lockstep
