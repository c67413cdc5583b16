// UTF-8 validity and Rust's String::from_utf8_lossy, for every build: the tokenizer.json reader
// (text/hf_*.cpp, optional) and the GGUF vocabulary converter (interop/gguf_vocab.cpp) use them.
#pragma once

#include <string>
#include <string_view>

namespace lockstep::text {

// Whether s is valid UTF-8 (Unicode's table 3-7).
bool valid_utf8(std::string_view s);
// Each maximal invalid subpart of `bytes` becomes one U+FFFD, as Rust's from_utf8_lossy (which
// Hugging Face's decoder uses) does.
std::string lossy_utf8(std::string_view bytes);

}  // namespace lockstep::text
