#include "train/frozen_loads.hpp"

#include "format/weights.hpp"
#include "lockstep/error.hpp"

namespace lockstep::train {
namespace {

std::string loads_text(const std::vector<format::LoadedTensor>& list) {
  std::string s;
  for (const auto& l : list)
    s += (s.empty() ? "" : ", ") + l.name + " from '" + l.file + "' (" + l.sha256.substr(0, 12) + ")";
  return s.empty() ? std::string("none") : s;
}

}  // namespace

FrozenLoads read_frozen_loads(const RunSpec& run, const ParameterRegistry& registry) {
  FrozenLoads out;
  for (const FrozenLoad& l : run.load) {
    const ParameterInfo& e = registry.at(l.parameter);
    try {
      format::TensorFromFile t = format::read_tensor_file(l.file, l.tensor, e.shape);
      out.recorded.push_back({l.parameter, l.file, l.tensor, t.file_sha256});
      out.values.push_back(std::move(t.values));
    } catch (const Error& err) {
      const std::string message = ":load of '" + l.parameter + "': " + err.what();
      throw Error(err.kind(), message, err.code()[0] != '\0' ? err.code() : nullptr);
    }
  }
  return out;
}

void check_same_loads(const std::vector<format::LoadedTensor>& there,
                      const std::vector<format::LoadedTensor>& here, const std::string& head) {
  bool same = there.size() == here.size();
  for (size_t i = 0; same && i < here.size(); ++i) {
    const auto &a = there[i], &b = here[i];
    same = a.name == b.name && a.file == b.file && a.tensor == b.tensor && a.sha256 == b.sha256;
  }
  if (!same)
    throw Error(ErrorKind::invalid_argument,
                head + "the :load parameters differ: " + loads_text(there) + " there, " + loads_text(here) + " here");
}

}  // namespace lockstep::train
