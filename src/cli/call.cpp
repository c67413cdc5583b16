// lockstep call: one call of a model without a server. Reads the call's input tensors raw from
// standard input (the protocol's call frame without its length) and writes the answer's outputs
// raw to standard output (the protocol's answer after its status byte).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cli/commands.hpp"
#include "lockstep/call.hpp"

namespace lockstep::cli {
namespace {

std::vector<uint8_t> read_stdin(size_t limit) {
  std::vector<uint8_t> data;
  uint8_t buf[65536];
  for (;;) {
    const ssize_t n = ::read(0, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(ErrorKind::io, std::string("cannot read standard input: ") + std::strerror(errno));
    }
    if (n == 0) break;
    data.insert(data.end(), buf, buf + n);
    if (data.size() > limit) break;  // already wrong; the size check names it
  }
  return data;
}

void write_stdout(const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(1, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw Error(ErrorKind::io, std::string("cannot write standard output: ") + std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

std::string describe(const std::vector<TensorSpec>& specs) {
  std::string s;
  for (size_t i = 0; i < specs.size(); ++i)
    s += (i ? " + " : "") + specs[i].name + " " + shape_text(specs[i].shape) + " " + specs[i].dtype;
  return s;
}

}  // namespace

Run add_call(CLI::App& app) {
  struct Flags {
    ModelFlags model;
    std::vector<std::string> outputs;
    bool at = false;
    std::string precision;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("call", "run one call: raw inputs on stdin, raw outputs on stdout");
  f->model.add_to(*cmd);
  cmd->add_option("--output", f->outputs, "only this output, repeatable, in the order given")
      ->allow_extra_args(false);  // one name per --output, so a MODEL after it stays one
  cmd->add_flag("--at", f->at, "a last input `at` i32 [1]; each output only at that position");
  cmd->add_option("--precision", f->precision, "bf16: matmul operands rounded to bf16");
  return [f] {
    LoadOptions options = f->model.load_options();
    if (!f->precision.empty()) options.precision = parse_precision(f->precision);
    const auto model = Model::load(f->model.path, options);
    const CallLayout layout(model->config(), f->outputs, f->at);
    const std::vector<uint8_t> input = read_stdin(layout.input_bytes());
    if (input.size() != layout.input_bytes())
      throw Error(ErrorKind::invalid_argument,
                  "standard input holds " + std::to_string(input.size()) + " bytes; a call takes " +
                      std::to_string(layout.input_bytes()) + " (" + describe(layout.inputs()) + ")");
    std::vector<uint8_t> output(layout.output_bytes());
    const std::span<const uint8_t> in_span(input);
    const std::span<uint8_t> out_span(output);
    const auto results = run_calls(*model, layout, {&in_span, 1}, {&out_span, 1});
    if (!results[0].ok) throw Error(ErrorKind::invalid_argument, results[0].error);
    write_stdout(output.data(), output.size());
    return 0;
  };
}

}  // namespace lockstep::cli
