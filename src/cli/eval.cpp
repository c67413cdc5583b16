// lockstep eval: a model's mean next-byte loss over a file, in windows of its length
// (docs/TRAINING.md, "Evaluation").
#include <cmath>
#include <cstdio>

#include "cli/commands.hpp"
#include "lockstep/training_run.hpp"

namespace lockstep::cli {

Run add_eval(CLI::App& app) {
  struct Flags {
    ModelFlags model;
    std::string data;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("eval", "print a model's mean loss and bits per byte over a file");
  f->model.add_to(*cmd);
  cmd->add_option("--data", f->data, "the bytes to evaluate on")->required();
  return [f] {
    const auto model = Model::load(f->model.path, f->model.load_options());
    const ByteEvaluation e = evaluate_file(*model, f->data);
    const ModelSource& s = model->source();
    std::printf("model      %s", s.directory.c_str());
    if (s.step)
      std::printf(" (step %lld%s%s)", static_cast<long long>(*s.step), s.slug ? " of run " : "",
                  s.slug ? s.slug->c_str() : "");
    std::printf("\n");
    std::printf("data       %s: %s bytes, %s predictions in %s windows of up to %d bytes\n", f->data.c_str(),
                with_commas(e.bytes).c_str(), with_commas(e.predictions).c_str(),
                with_commas(e.windows).c_str(), model->config().length + 1);
    std::printf("loss       %.9g (f32 bits 0x%08x)\n", static_cast<double>(e.loss), e.loss_bits);
    std::printf("bits/byte  %.6f\n", e.bits_per_byte);
    return 0;
  };
}

}  // namespace lockstep::cli
