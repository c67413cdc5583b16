// The playground page served at GET / (src/serve/playground.cpp holds it; no CDN, nothing from
// the internet).
#pragma once

#include <string_view>

namespace lockstep::serve {

std::string_view playground_html();

}  // namespace lockstep::serve
