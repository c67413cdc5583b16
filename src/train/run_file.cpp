// The defrun schema: each key's reader, the defaults that follow other keys, and the checks
// between keys (docs/TRAINING.md lists every key).
#include "train/run_file.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "format/mapped_file.hpp"
#include "lockstep/error.hpp"

namespace lockstep {
namespace train {
namespace {

// The defrun being read: the spec so far and where each key was given.
struct Builder {
  const std::string& file;
  RunSpec spec;
  std::map<std::string, SourcePos> given;  // key name without ':'

  [[noreturn]] void bad(const Sexp& v, const std::string& key, const std::string& want) const {
    fail(file, v.pos, ":" + key + " must be " + want + ", got " + describe(v));
  }

  int64_t integer(const Sexp& v, const std::string& key, int64_t lo, int64_t hi) const {
    const std::string want = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    if (v.kind != Sexp::Kind::number) bad(v, key, want);
    const char* begin = v.text.data() + (v.text[0] == '+' ? 1 : 0);
    int64_t x = 0;
    const auto r = std::from_chars(begin, v.text.data() + v.text.size(), x);
    if (r.ec != std::errc() || r.ptr != v.text.data() + v.text.size() || x < lo || x > hi) bad(v, key, want);
    return x;
  }

  int32_t int32(const Sexp& v, const std::string& key, int64_t lo, int64_t hi) const {
    return static_cast<int32_t>(integer(v, key, lo, hi));
  }

  // A number as f32: refused when it has no finite f32 value.
  float real(const Sexp& v, const std::string& key, const std::string& want) const {
    if (v.kind != Sexp::Kind::number) bad(v, key, want);
    const char* begin = v.text.data() + (v.text[0] == '+' ? 1 : 0);
    double x = 0.0;
    const auto r = std::from_chars(begin, v.text.data() + v.text.size(), x);
    if (r.ec != std::errc() || r.ptr != v.text.data() + v.text.size() || !(std::fabs(x) < 0x1.ffffffp127))
      bad(v, key, want);
    return static_cast<float>(x);
  }

  std::string symbol(const Sexp& v, const std::string& key,
                     std::initializer_list<const char*> allowed) const {
    std::string want = "one of";
    for (const char* a : allowed) want += std::string(" ") + a;
    if (v.kind != Sexp::Kind::symbol && v.kind != Sexp::Kind::string) bad(v, key, want);
    for (const char* a : allowed)
      if (v.text == a) return v.text;
    bad(v, key, want);
  }

  std::string path(const Sexp& v, const std::string& key, const std::string& want) const {
    if (v.kind != Sexp::Kind::string) bad(v, key, want);
    if (v.text.empty()) fail(file, v.pos, ":" + key + " names an empty path");
    if (v.text.find('\0') != std::string::npos)
      fail(file, v.pos, ":" + key + " names a path holding a NUL byte");
    return v.text;
  }
};

// An exact decimal in [0, 1) with at most six places, as parts per million: no floating point
// decides which bytes are held out.
int64_t parts_per_million(const Builder& b, const Sexp& v, const std::string& key) {
  const std::string want = "a decimal in [0, 1) with at most 6 places, like 0.1";
  if (v.kind != Sexp::Kind::number) b.bad(v, key, want);
  std::string_view s = v.text;
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  if (s.find_first_of("eE-") != std::string_view::npos) b.bad(v, key, want);
  const size_t dot = s.find('.');
  const std::string_view whole = s.substr(0, dot);
  std::string_view fraction = dot == std::string_view::npos ? std::string_view() : s.substr(dot + 1);
  if (whole.find_first_not_of('0') != std::string_view::npos) b.bad(v, key, want);
  while (!fraction.empty() && fraction.back() == '0') fraction.remove_suffix(1);
  if (fraction.size() > 6) b.bad(v, key, want);
  int64_t ppm = 0;
  for (size_t i = 0; i < 6; ++i) ppm = ppm * 10 + (i < fraction.size() ? fraction[i] - '0' : 0);
  return ppm;
}

using Apply = std::function<void(Builder&, const Sexp&, const std::string&)>;

const std::map<std::string, Apply>& schema() {
  static const std::map<std::string, Apply> keys = [] {
    std::map<std::string, Apply> k;
    // The model.
    k["vocab-size"] = [](Builder& b, const Sexp& v, const std::string& key) {
      b.spec.model.vocab_size = b.int32(v, key, 1, 1 << 20);
    };
    k["length"] = [](Builder& b, const Sexp& v, const std::string& key) {
      b.spec.model.length = b.int32(v, key, 1, 65536);
    };
    k["d-model"] = [](Builder& b, const Sexp& v, const std::string& key) {
      b.spec.model.d_model = b.int32(v, key, 2, 65536);
    };
    k["n-layers"] = [](Builder& b, const Sexp& v, const std::string& key) {
      b.spec.model.n_layers = b.int32(v, key, 1, 1024);
    };
    k["n-heads"] = [](Builder& b, const Sexp& v, const std::string& key) {
      b.spec.model.n_heads = b.int32(v, key, 1, 65536);
    };
    k["n-kv-heads"] = [](Builder& b, const Sexp& v, const std::string& key) {
      b.spec.model.n_kv_heads = b.int32(v, key, 1, 65536);
    };
    k["d-ff"] = [](Builder& b, const Sexp& v, const std::string& key) {
      b.spec.model.d_ff = b.int32(v, key, 1, 262144);
    };
    k["norm-eps"] = [](Builder& b, const Sexp& v, const std::string& key) {
      const float x = b.real(v, key, "a positive number");
      if (!(x > 0.0f)) b.bad(v, key, "a positive number");
      b.spec.model.norm_eps = x;
    };
    k["rope-theta"] = [](Builder& b, const Sexp& v, const std::string& key) {
      const float x = b.real(v, key, "a number > 1");
      if (!(x > 1.0f)) b.bad(v, key, "a number > 1");
      b.spec.model.rope_theta = x;
    };
    k["batch"] = [](Builder& b, const Sexp& v, const std::string& key) {
      b.spec.model.batch = b.int32(v, key, 1, 65536);
    };
    // The data.
    k["data"] = [](Builder& b, const Sexp& v, const std::string& key) {
      const std::string want = "a file name in a string, or a list of them";
      if (v.kind == Sexp::Kind::string) {
        b.spec.data = {b.path(v, key, want)};
        return;
      }
      if (v.kind != Sexp::Kind::list || v.items.empty()) b.bad(v, key, want);
      for (const Sexp& item : v.items) b.spec.data.push_back(b.path(item, key, want));
    };
    k["held-out"] = [](Builder& b, const Sexp& v, const std::string& key) {
      b.spec.held_out_ppm = parts_per_million(b, v, key);
    };
    // Optimisation.
    k["steps"] = [](Builder& b, const Sexp& v, const std::string& key) {
      b.spec.steps = b.integer(v, key, 1, 1000000000);
    };
    k["seed"] = [](Builder& b, const Sexp& v, const std::string& key) {
      const std::string want = "an integer in [0, 18446744073709551615]";
      if (v.kind != Sexp::Kind::number) b.bad(v, key, want);
      const char* begin = v.text.data() + (v.text[0] == '+' ? 1 : 0);
      uint64_t x = 0;
      const auto r = std::from_chars(begin, v.text.data() + v.text.size(), x);
      if (r.ec != std::errc() || r.ptr != v.text.data() + v.text.size()) b.bad(v, key, want);
      b.spec.seed = x;
    };
    k["lr"] = [](Builder& b, const Sexp& v, const std::string& key) {
      const float x = b.real(v, key, "a positive number");
      if (!(x > 0.0f)) b.bad(v, key, "a positive number");
      b.spec.lr = x;
    };
    k["lr-min"] = [](Builder& b, const Sexp& v, const std::string& key) {
      const float x = b.real(v, key, "a positive number");
      if (!(x > 0.0f)) b.bad(v, key, "a positive number");
      b.spec.lr_min = x;
    };
    k["warmup"] = [](Builder& b, const Sexp& v, const std::string& key) {
      b.spec.warmup = b.integer(v, key, 0, 1000000000);
    };
    k["schedule"] = [](Builder& b, const Sexp& v, const std::string& key) {
      b.spec.schedule =
          b.symbol(v, key, {"cosine", "constant"}) == "cosine" ? LrSchedule::cosine : LrSchedule::constant;
    };
    k["weight-decay"] = [](Builder& b, const Sexp& v, const std::string& key) {
      const float x = b.real(v, key, "a number >= 0");
      if (!(x >= 0.0f)) b.bad(v, key, "a number >= 0");
      b.spec.adamw.weight_decay = x;
    };
    k["beta1"] = [](Builder& b, const Sexp& v, const std::string& key) {
      const float x = b.real(v, key, "a number in [0, 1)");
      if (!(x >= 0.0f && x < 1.0f)) b.bad(v, key, "a number in [0, 1)");
      b.spec.adamw.beta1 = x;
    };
    k["beta2"] = [](Builder& b, const Sexp& v, const std::string& key) {
      const float x = b.real(v, key, "a number in [0, 1)");
      if (!(x >= 0.0f && x < 1.0f)) b.bad(v, key, "a number in [0, 1)");
      b.spec.adamw.beta2 = x;
    };
    k["eps"] = [](Builder& b, const Sexp& v, const std::string& key) {
      const float x = b.real(v, key, "a positive number");
      if (!(x > 0.0f)) b.bad(v, key, "a positive number");
      b.spec.adamw.eps = x;
    };
    k["clip"] = [](Builder& b, const Sexp& v, const std::string& key) {
      const float x = b.real(v, key, "a number >= 0 (0: no clipping)");
      if (!(x >= 0.0f)) b.bad(v, key, "a number >= 0 (0: no clipping)");
      b.spec.adamw.clip_norm = x;
    };
    k["ema"] = [](Builder& b, const Sexp& v, const std::string& key) {
      const float x = b.real(v, key, "a decay in [0, 1) (0: no EMA)");
      if (!(x >= 0.0f && x < 1.0f)) b.bad(v, key, "a decay in [0, 1) (0: no EMA)");
      b.spec.ema = x;
    };
    k["precision"] = [](Builder& b, const Sexp& v, const std::string& key) {
      b.spec.precision = parse_precision(b.symbol(v, key, {"f32", "bf16"}));
    };
    // Checkpoints and evaluation.
    k["checkpoint-every"] = [](Builder& b, const Sexp& v, const std::string& key) {
      b.spec.checkpoint_every = b.integer(v, key, 0, 1000000000);
    };
    k["keep"] = [](Builder& b, const Sexp& v, const std::string& key) {
      b.spec.keep = b.integer(v, key, 0, 1000000);
    };
    k["eval-every"] = [](Builder& b, const Sexp& v, const std::string& key) {
      b.spec.eval_every = b.integer(v, key, 0, 1000000000);
    };
    k["eval-batches"] = [](Builder& b, const Sexp& v, const std::string& key) {
      b.spec.eval_batches = b.integer(v, key, 1, 100000);
    };
    // Frozen parameters: ((PARAMETER "file.safetensors" ["tensor name in the file"]) ...)
    k["load"] = [](Builder& b, const Sexp& v, const std::string& key) {
      const std::string want = "a list of (PARAMETER \"file.safetensors\") lists";
      if (v.kind != Sexp::Kind::list) b.bad(v, key, want);
      for (const Sexp& item : v.items) {
        if (item.kind != Sexp::Kind::list || item.items.size() < 2 || item.items.size() > 3)
          b.bad(item, key, want);
        const Sexp& name = item.items[0];
        if (name.kind != Sexp::Kind::symbol && name.kind != Sexp::Kind::string)
          b.bad(name, key,
                "a list of (PARAMETER \"file.safetensors\") lists whose PARAMETER is a registry name like "
                "embed");
        FrozenLoad load{name.text,
                        b.path(item.items[1], key, "a list of (PARAMETER \"file.safetensors\") lists"),
                        name.text};
        if (item.items.size() == 3) {
          const Sexp& tensor = item.items[2];
          if (tensor.kind != Sexp::Kind::string || tensor.text.empty())
            b.bad(tensor, key,
                  "a list of (PARAMETER \"file\" \"tensor name\") lists, the tensor name a non-empty string");
          load.tensor = tensor.text;
        }
        b.spec.load.push_back(std::move(load));
      }
    };
    return k;
  }();
  return keys;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string unknown_key_message(const std::string& key) {
  std::string message = ":" + key + " is not a defrun key";
  std::string nearest;
  size_t best = 3;  // suggest only close misspellings
  for (const auto& [name, apply] : schema()) {
    const size_t d = edit_distance(key, name);
    if (d < best) {
      best = d;
      nearest = name;
    }
  }
  if (!nearest.empty()) message += " (did you mean :" + nearest + "?)";
  message += "; valid keys:";
  for (const std::string& k : run_file_keys()) message += " " + k;
  return message;
}

// A slug names the run in model.json and in file names: letters, digits, '.', '_', '-', starting
// with a letter or digit.
bool is_slug(std::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (!alnum(s[0])) return false;
  return std::all_of(s.begin(), s.end(),
                     [&](char c) { return alnum(c) || c == '.' || c == '_' || c == '-'; });
}

// Checks between keys, each reported where the later of them was given.
void check_together(Builder& b, SourcePos defrun) {
  auto where = [&](std::initializer_list<const char*> keys) {
    SourcePos at = defrun;
    for (const char* k : keys) {
      const auto it = b.given.find(k);
      if (it != b.given.end() &&
          (it->second.line > at.line || (it->second.line == at.line && it->second.column > at.column)))
        at = it->second;
    }
    return at;
  };
  ModelConfig& c = b.spec.model;
  if (c.n_heads > c.d_model || c.d_model % c.n_heads != 0)
    fail(b.file, where({"d-model", "n-heads"}),
         ":n-heads " + std::to_string(c.n_heads) + " must divide :d-model " + std::to_string(c.d_model));
  if ((c.d_model / c.n_heads) % 2 != 0)
    fail(b.file, where({"d-model", "n-heads"}),
         "the head width :d-model / :n-heads = " + std::to_string(c.d_model / c.n_heads) +
             " must be even (RoPE rotates pairs)");
  if (c.n_kv_heads > c.n_heads || c.n_heads % c.n_kv_heads != 0)
    fail(
        b.file, where({"n-heads", "n-kv-heads"}),
        ":n-kv-heads " + std::to_string(c.n_kv_heads) + " must divide :n-heads " + std::to_string(c.n_heads));
  try {
    c.validate();
  } catch (const Error& e) {
    fail(b.file, defrun, std::string("the model configuration is invalid: ") + e.what());
  }
  // validate() refused more than max_parameters, naming the bytes they would need.
  const ParameterRegistry registry(c);
  if (b.spec.lr_min > b.spec.lr) fail(b.file, where({"lr", "lr-min"}), ":lr-min must not exceed :lr");
  if (b.spec.data.empty()) fail(b.file, defrun, "the run names no :data; give at least one byte file");
  std::set<std::string> frozen;
  for (const FrozenLoad& l : b.spec.load) {
    if (registry.find(l.parameter) < 0)
      fail(b.file, where({"load"}),
           ":load names '" + l.parameter +
               "', which is not a parameter of this model (registry names: embed, "
               "layers.0.wq, ..., final_norm, head)");
    if (!frozen.insert(l.parameter).second)
      fail(b.file, where({"load"}), ":load names '" + l.parameter + "' twice");
  }
}

}  // namespace
}  // namespace train

const std::vector<std::string>& run_file_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    for (const auto& [name, apply] : train::schema()) k.push_back(":" + name);
    return k;
  }();
  return keys;
}

RunSpec parse_run_file(std::string_view text, const std::string& path) {
  using train::Sexp;
  if (text.size() > train::kMaxRunFileBytes)
    train::fail(path, {1, 1},
                "the file holds " + std::to_string(text.size()) + " bytes, more than the " +
                    std::to_string(train::kMaxRunFileBytes) + " a run file may");
  const std::vector<Sexp> forms = train::read_sexps(text, path);
  if (forms.empty()) train::fail(path, {1, 1}, "the file holds no (defrun NAME :key value ...) form");
  if (forms.size() > 1)
    train::fail(path, forms[1].pos, "a run file holds one (defrun ...) form; this is a second");
  const Sexp& form = forms[0];
  if (form.kind != Sexp::Kind::list || form.items.empty() || form.items[0].kind != Sexp::Kind::symbol ||
      form.items[0].text != "defrun")
    train::fail(path, form.pos, "a run file holds a (defrun NAME :key value ...) form");
  if (form.items.size() < 2) train::fail(path, form.pos, "(defrun) needs a NAME, the run's slug");
  const Sexp& name = form.items[1];
  if ((name.kind != Sexp::Kind::symbol && name.kind != Sexp::Kind::number) || !train::is_slug(name.text))
    train::fail(path, name.pos,
                "the run's NAME must be a symbol of letters, digits, '.', '_' and '-' starting with a "
                "letter or digit, got " +
                    train::describe(name));

  train::Builder b{path, {}, {}};
  b.spec.slug = name.text;
  b.spec.path = path;
  b.spec.text = std::string(text);
  // Defaults that follow other keys unless given: n-kv-heads = n-heads, d-ff = 3 d-model,
  // lr-min = lr / 10.
  b.spec.model.vocab_size = 256;
  b.spec.model.length = 64;
  b.spec.model.d_model = 64;
  b.spec.model.n_layers = 2;
  b.spec.model.n_heads = 4;
  b.spec.model.batch = 8;
  b.spec.adamw.lr = b.spec.lr;
  b.spec.adamw.beta1 = 0.9f;
  b.spec.adamw.beta2 = 0.99f;
  b.spec.adamw.eps = 1e-8f;
  b.spec.adamw.weight_decay = 0.01f;
  b.spec.adamw.clip_norm = 1.0f;
  for (size_t i = 2; i < form.items.size(); i += 2) {
    const Sexp& key = form.items[i];
    if (key.kind != Sexp::Kind::keyword)
      train::fail(
          path, key.pos,
          "expected a :key, got " + train::describe(key) + "; a defrun is (defrun NAME :key value ...)");
    const auto it = train::schema().find(key.text);
    if (it == train::schema().end()) train::fail(path, key.pos, train::unknown_key_message(key.text));
    if (const auto seen = b.given.find(key.text); seen != b.given.end())
      train::fail(path, key.pos,
                  ":" + key.text + " is given twice (first at line " + std::to_string(seen->second.line) +
                      ", column " + std::to_string(seen->second.column) + ")");
    if (i + 1 >= form.items.size()) train::fail(path, key.pos, ":" + key.text + " has no value");
    const Sexp& value = form.items[i + 1];
    if (value.kind == Sexp::Kind::keyword)
      train::fail(path, value.pos, ":" + key.text + " has no value before :" + value.text);
    b.given[key.text] = key.pos;
    it->second(b, value, key.text);
  }
  if (!b.given.count("n-kv-heads")) b.spec.model.n_kv_heads = b.spec.model.n_heads;
  if (!b.given.count("d-ff")) {
    const int64_t d_ff = int64_t{3} * b.spec.model.d_model;
    b.spec.model.d_ff = static_cast<int32_t>(std::min<int64_t>(d_ff, 262144));
  }
  if (!b.given.count("lr-min")) b.spec.lr_min = static_cast<float>(static_cast<double>(b.spec.lr) / 10.0);
  b.spec.adamw.lr = b.spec.lr;
  train::check_together(b, form.items[0].pos);
  return std::move(b.spec);
}

RunSpec read_run_file(const std::string& path) {
  return parse_run_file(format::read_text_file(path, train::kMaxRunFileBytes), path);
}

}  // namespace lockstep
