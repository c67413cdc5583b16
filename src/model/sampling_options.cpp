// The sampling options' checks alone (no kernels), so that the HTTP request parser's fuzz target
// can link them.
#include <cmath>
#include <string>

#include "core/number_text.hpp"
#include "lockstep/error.hpp"
#include "lockstep/sampling.hpp"

namespace lockstep {

void SamplingOptions::validate() const {
  if (!(std::isfinite(temperature) && temperature >= 0.0f))
    throw Error(ErrorKind::invalid_argument, "temperature must be a finite number >= 0 (0: greedy), got " + number_text(temperature));
  if (top_k < 0) throw Error(ErrorKind::invalid_argument, "top-k must be >= 0 (0: off), got " + std::to_string(top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f))
    throw Error(ErrorKind::invalid_argument, "top-p must be in (0, 1] (1: off), got " + number_text(top_p));
}

}  // namespace lockstep
