#include "train/train_support.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/rng.hpp"
#include "format/json_text.hpp"

namespace lockstep::test {

std::string text_data(int64_t bytes, uint64_t seed) {
  static const char* words[] = {"the ",  "cat ", "sat ", "on ",   "a ",
                                "mat. ", "and ", "dog ", "ran\n", "far, "};
  std::string out;
  for (uint64_t i = 0; static_cast<int64_t>(out.size()) < bytes; ++i)
    out += words[random_below(10, seed, 5, i)];
  out.resize(static_cast<size_t>(bytes));
  return out;
}

std::string tiny_run_text(const std::string& data, const RunKeys& keys) {
  RunKeys all = {{":data", "\"" + data + "\""},
                 {":length", "8"},
                 {":d-model", "8"},
                 {":n-layers", "1"},
                 {":n-heads", "2"},
                 {":d-ff", "12"},
                 {":batch", "2"},
                 {":steps", "12"},
                 {":warmup", "3"},
                 {":lr", "1e-2"},
                 {":lr-min", "1e-3"},
                 {":seed", "3"},
                 {":ema", "0.9"},
                 {":checkpoint-every", "4"},
                 {":eval-every", "4"},
                 {":eval-batches", "2"},
                 {":held-out", "0.1"}};
  for (const auto& [key, value] : keys) {
    bool replaced = false;
    for (auto& [k, v] : all)
      if (k == key) {
        v = value;
        replaced = true;
      }
    if (!replaced) all.push_back({key, value});
  }
  std::string text = "; a test run\n(defrun tiny-test";
  for (const auto& [key, value] : all) text += "\n  " + key + " " + value;
  return text + ")\n";
}

std::string write_tiny_run(const TempDir& dir, const RunKeys& keys, int64_t data_bytes) {
  write_file(dir / "data.txt", text_data(data_bytes, 11));
  write_file(dir / "run.sx", tiny_run_text(dir / "data.txt", keys));
  return dir / "run.sx";
}

namespace {

void collect(const std::string& root, const std::string& rel, std::map<std::string, std::string>& out) {
  DIR* d = ::opendir((root + "/" + rel).c_str());
  if (!d) return;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  for (const std::string& name : names) {
    const std::string r = rel.empty() ? name : rel + "/" + name;
    struct stat st;
    if (::lstat((root + "/" + r).c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      collect(root, r, out);
    } else if (r != "metrics.jsonl") {
      out[r] = read_file(root + "/" + r);
    }
  }
}

}  // namespace

std::map<std::string, std::string> checkpoint_files(const std::string& dir) {
  std::map<std::string, std::string> out;
  collect(dir, "", out);
  return out;
}

std::vector<std::string> temporaries_in(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(".step-", 0) == 0 && name.find(".tmp-") != std::string::npos) out.push_back(name);
  }
  ::closedir(d);
  return out;
}

pid_t spawn(const std::vector<std::string>& argv) {
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

std::map<int64_t, std::string> metrics_loss_bits(const std::string& path) {
  std::map<int64_t, std::string> out;
  std::istringstream in(read_file(path));
  std::string line;
  while (std::getline(in, line)) {
    const auto j = lockstep::format::parse_json(line);
    const int64_t step = j.at("step").get<int64_t>();
    if (out.count(step))
      throw std::runtime_error("metrics.jsonl has step " + std::to_string(step) + " twice");
    out[step] = j.at("loss_bits").get<std::string>();
  }
  return out;
}

}  // namespace lockstep::test
