// The protocol's messages (docs/PROTOCOL.md): every message either way is a frame, a
// little-endian u64 byte count then that many bytes. The server speaks first with the handshake
// (JSON); then each client frame is one call (the inputs, raw) and each server frame its answer
// (a status byte, then the outputs raw or UTF-8 error text).
#pragma once

#include <cstdint>
#include <string>

#include "lockstep/call.hpp"
#include "lockstep/model.hpp"
#include "serve/wire.hpp"

namespace lockstep::serve {

// {"protocol", "checkpoint", "step", "slug", "precision", "inputs", "outputs"} as JSON text;
// inputs and outputs as the layout (the flags) left them.
std::string handshake_json(const Model& model, const CallLayout& layout, const std::string& replica);

// The handshake a connection gets instead when the server cannot serve it (at its connection
// limit): {"protocol": 1, "error": TEXT}. A client raises TEXT; the server then closes.
std::string refusal_handshake_json(const std::string& error);

// The error answered to a call frame whose length is not the layout's input bytes.
std::string wrong_length_message(const CallLayout& layout, uint64_t got);

}  // namespace lockstep::serve
