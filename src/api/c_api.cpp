// The C API (include/lockstep/lockstep.h) over the public C++ API: handles that own C++
// objects, and one guard per entry point that turns every exception into a status code and a
// message written to the caller's error object. Nothing here reaches below include/lockstep/.
#include "lockstep/lockstep.h"

#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "lockstep/config.hpp"
#include "lockstep/error.hpp"
#include "lockstep/model.hpp"
#include "lockstep/trainer.hpp"

struct lockstep_error {
  lockstep_status status = LOCKSTEP_OK;
  std::string message;
  std::string code;
};

struct lockstep_thread_pool {
  std::shared_ptr<lockstep::ThreadPool> pool;
};

struct lockstep_model {
  std::shared_ptr<const lockstep::Model> model;
};

struct lockstep_trainer {
  lockstep::Trainer trainer;
};

namespace {

using lockstep::Error;
using lockstep::ErrorKind;

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorKind::invalid_argument, message);
}

template <class T>
void require_pointer(const T* p, const char* function, const char* name) {
  if (!p) invalid(std::string(function) + ": " + name + " is NULL");
}

lockstep_status status_of(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::invalid_argument: return LOCKSTEP_ERROR_INVALID_ARGUMENT;
    case ErrorKind::type: return LOCKSTEP_ERROR_TYPE;
    case ErrorKind::format: return LOCKSTEP_ERROR_FORMAT;
    case ErrorKind::io: return LOCKSTEP_ERROR_IO;
    case ErrorKind::unsupported: return LOCKSTEP_ERROR_UNSUPPORTED;
    case ErrorKind::state: return LOCKSTEP_ERROR_STATE;
    case ErrorKind::internal: return LOCKSTEP_ERROR_INTERNAL;
  }
  return LOCKSTEP_ERROR_INTERNAL;
}

// Records a failure in the caller's error object. Never throws: when even the message cannot be
// stored, the status still is.
lockstep_status fail(lockstep_error* error, lockstep_status status, const char* message,
                     const char* code = "") noexcept {
  if (error) {
    error->status = status;
    try {
      error->message = message;
      error->code = code;
    } catch (...) {
      error->message.clear();
      error->code.clear();
    }
  }
  return status;
}

// Runs `body`, mapping whatever it throws to a status.
template <class Body>
lockstep_status guarded(lockstep_error* error, Body&& body) noexcept {
  try {
    body();
    return LOCKSTEP_OK;
  } catch (const Error& e) {
    return fail(error, status_of(e.kind()), e.what(), e.code());
  } catch (const std::bad_alloc&) {
    return fail(error, LOCKSTEP_ERROR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return fail(error, LOCKSTEP_ERROR_INTERNAL, e.what());
  } catch (...) {
    return fail(error, LOCKSTEP_ERROR_INTERNAL, "an unknown exception reached the C API");
  }
}

lockstep::ModelConfig to_cpp(const lockstep_config& c) {
  lockstep::ModelConfig m;
  m.vocab_size = c.vocab_size;
  m.length = c.length;
  m.d_model = c.d_model;
  m.n_layers = c.n_layers;
  m.n_heads = c.n_heads;
  m.n_kv_heads = c.n_kv_heads;
  m.d_ff = c.d_ff;
  m.norm_eps = c.norm_eps;
  m.rope_theta = c.rope_theta;
  m.batch = c.batch;
  return m;
}

lockstep_config to_c(const lockstep::ModelConfig& m) {
  lockstep_config c;
  c.vocab_size = m.vocab_size;
  c.length = m.length;
  c.d_model = m.d_model;
  c.n_layers = m.n_layers;
  c.n_heads = m.n_heads;
  c.n_kv_heads = m.n_kv_heads;
  c.d_ff = m.d_ff;
  c.norm_eps = m.norm_eps;
  c.rope_theta = m.rope_theta;
  c.batch = m.batch;
  return c;
}

// The integer a C caller stored in an enum-typed field or argument. C lets any int live there,
// but in C++ loading a value outside the enum's range of values is undefined behaviour (UBSan
// reports it): every enum that comes through the C API is read as its int first, through
// memcpy, validated, and only then converted. `value` is taken by reference so that not even the
// call loads it as the enum.
template <class Enum>
int enum_int(const Enum& value) {
  static_assert(std::is_enum_v<Enum> && sizeof(Enum) == sizeof(int));
  int v;
  std::memcpy(&v, &value, sizeof v);
  return v;
}

// DEFAULT -> `fallback`; an integer outside the header's list is refused.
lockstep::Device to_device(const lockstep_device& d, lockstep::Device fallback) {
  switch (const int v = enum_int(d)) {
    case LOCKSTEP_DEVICE_DEFAULT: return fallback;
    case LOCKSTEP_DEVICE_CPU: return lockstep::Device::cpu;
    case LOCKSTEP_DEVICE_REFERENCE: return lockstep::Device::reference;
    default:
      invalid("device " + std::to_string(v) + " is not a lockstep_device (DEFAULT, CPU or REFERENCE)");
  }
}

std::optional<lockstep::Precision> to_precision(const lockstep_precision& p) {
  switch (const int v = enum_int(p)) {
    case LOCKSTEP_PRECISION_DEFAULT: return std::nullopt;
    case LOCKSTEP_PRECISION_F32: return lockstep::Precision::f32;
    case LOCKSTEP_PRECISION_BF16: return lockstep::Precision::bf16;
    default:
      invalid("precision " + std::to_string(v) + " is not a lockstep_precision (DEFAULT, F32 or BF16)");
  }
}

lockstep::LoadOptions to_cpp(const lockstep_model_options* options) {
  const lockstep_model_options o = options ? *options : lockstep_model_default_options();
  lockstep::LoadOptions out;
  out.device = to_device(o.device, lockstep::Device::cpu);
  out.threads = o.threads;  // range-checked by the model
  out.precision = to_precision(o.precision);
  if (o.pool) out.pool = o.pool->pool;
  if (o.simd_target) out.simd_target = o.simd_target;
  out.trained = o.trained != 0;
  return out;
}

lockstep::CallOptions to_cpp(const lockstep_call_options* call) {
  lockstep::CallOptions out;
  if (!call) return out;
  if (enum_int(call->device) != LOCKSTEP_DEVICE_DEFAULT)
    out.device = to_device(call->device, lockstep::Device::cpu);
  if (call->threads != 0) out.threads = call->threads;  // range-checked by the model
  return out;
}

lockstep::TrainerOptions to_cpp(const lockstep_trainer_options* options) {
  const lockstep_trainer_options o = options ? *options : lockstep_trainer_default_options();
  lockstep::TrainerOptions out;
  out.device = to_device(o.device, lockstep::Device::cpu);
  out.threads = o.threads;
  if (o.pool) out.pool = o.pool->pool;
  out.precision = to_precision(o.precision).value_or(lockstep::Precision::f32);
  out.adamw.lr = o.lr;
  out.adamw.beta1 = o.beta1;
  out.adamw.beta2 = o.beta2;
  out.adamw.eps = o.eps;
  out.adamw.weight_decay = o.weight_decay;
  out.adamw.clip_norm = o.clip_norm;
  out.ema_decay = o.ema_decay;
  return out;
}

// The number of outputs [rows, cols, width] when the shape is one the model accepts, checked
// against the caller's capacity. A shape the model refuses is left for the model to name.
void check_capacity(const lockstep::ModelConfig& c, int64_t rows, int64_t cols, int64_t width,
                    int64_t capacity, const char* function, const char* name) {
  if (rows < 1 || cols < 1 || cols > c.length) return;
  const int64_t per_row = cols * width;  // <= 2^16 * 2^20: no overflow
  if (rows > std::numeric_limits<int64_t>::max() / per_row)
    invalid(std::string(function) + ": " + std::to_string(rows) + " rows is too many");
  const int64_t need = rows * per_row;
  if (capacity < need)
    invalid(std::string(function) + ": " + name + " holds " + std::to_string(capacity) +
            " elements; [" + std::to_string(rows) + ", " + std::to_string(cols) +
            (width > 1 ? ", " + std::to_string(width) : std::string()) + "] needs " +
            std::to_string(need));
}

std::span<const int32_t> lengths_span(const int32_t* lengths, int64_t rows) {
  if (!lengths || rows < 1) return {};
  return {lengths, static_cast<size_t>(rows)};
}

// The flat parameter count a configuration needs; throws when it is invalid.
int64_t parameter_total(const lockstep_config& config) {
  return lockstep::ParameterRegistry(to_cpp(config)).total();
}

}  // namespace

extern "C" {

const char* lockstep_status_name(lockstep_status status) {
  switch (enum_int(status)) {
    case LOCKSTEP_OK: return "ok";
    case LOCKSTEP_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case LOCKSTEP_ERROR_TYPE: return "type error";
    case LOCKSTEP_ERROR_FORMAT: return "format error";
    case LOCKSTEP_ERROR_IO: return "I/O error";
    case LOCKSTEP_ERROR_UNSUPPORTED: return "unsupported";
    case LOCKSTEP_ERROR_STATE: return "state error";
    case LOCKSTEP_ERROR_INTERNAL: return "internal error";
    case LOCKSTEP_ERROR_OUT_OF_MEMORY: return "out of memory";
  }
  return "unknown status";
}

lockstep_error* lockstep_error_create(void) { return new (std::nothrow) lockstep_error(); }
void lockstep_error_free(lockstep_error* error) { delete error; }
void lockstep_error_clear(lockstep_error* error) {
  if (!error) return;
  error->status = LOCKSTEP_OK;
  error->message.clear();
  error->code.clear();
}
lockstep_status lockstep_error_status(const lockstep_error* error) {
  return error ? error->status : LOCKSTEP_OK;
}
const char* lockstep_error_message(const lockstep_error* error) {
  return error ? error->message.c_str() : "";
}
const char* lockstep_error_code(const lockstep_error* error) {
  return error ? error->code.c_str() : "";
}

const char* lockstep_version(void) { return LOCKSTEP_VERSION_STRING; }
const char* lockstep_profile_name(void) { return lockstep::profile_name(); }
int lockstep_default_thread_count(void) {
  try {
    return lockstep::default_thread_count();
  } catch (...) {
    return 1;
  }
}

lockstep_config lockstep_config_default(void) { return to_c(lockstep::ModelConfig{}); }

lockstep_status lockstep_config_validate(const lockstep_config* config, lockstep_error* error) {
  return guarded(error, [&] {
    require_pointer(config, "lockstep_config_validate", "config");
    to_cpp(*config).validate();
  });
}

lockstep_status lockstep_config_parameter_count(const lockstep_config* config, int64_t* count,
                                                lockstep_error* error) {
  return guarded(error, [&] {
    require_pointer(config, "lockstep_config_parameter_count", "config");
    require_pointer(count, "lockstep_config_parameter_count", "count");
    *count = parameter_total(*config);
  });
}

lockstep_status lockstep_thread_pool_create(int threads, lockstep_thread_pool** out,
                                            lockstep_error* error) {
  if (out) *out = nullptr;
  return guarded(error, [&] {
    require_pointer(out, "lockstep_thread_pool_create", "out");
    auto handle = std::make_unique<lockstep_thread_pool>();
    handle->pool = lockstep::make_thread_pool(threads);
    *out = handle.release();
  });
}
void lockstep_thread_pool_free(lockstep_thread_pool* pool) { delete pool; }
int lockstep_thread_pool_size(const lockstep_thread_pool* pool) {
  return pool ? lockstep::thread_pool_size(*pool->pool) : 0;
}

lockstep_model_options lockstep_model_default_options(void) {
  lockstep_model_options o;
  o.device = LOCKSTEP_DEVICE_DEFAULT;
  o.threads = 0;
  o.precision = LOCKSTEP_PRECISION_DEFAULT;
  o.pool = nullptr;
  o.simd_target = nullptr;
  o.trained = 0;
  return o;
}

lockstep_call_options lockstep_call_default_options(void) {
  lockstep_call_options o;
  o.device = LOCKSTEP_DEVICE_DEFAULT;
  o.threads = 0;
  return o;
}

lockstep_status lockstep_model_load(const char* path, const lockstep_model_options* options,
                                    lockstep_model** out, lockstep_error* error) {
  if (out) *out = nullptr;
  return guarded(error, [&] {
    require_pointer(path, "lockstep_model_load", "path");
    require_pointer(out, "lockstep_model_load", "out");
    auto handle = std::make_unique<lockstep_model>();
    handle->model = lockstep::Model::load(path, to_cpp(options));
    *out = handle.release();
  });
}

lockstep_status lockstep_model_from_parameters(const lockstep_config* config,
                                               const float* parameters, int64_t count,
                                               const lockstep_model_options* options,
                                               lockstep_model** out, lockstep_error* error) {
  if (out) *out = nullptr;
  return guarded(error, [&] {
    const char* fn = "lockstep_model_from_parameters";
    require_pointer(config, fn, "config");
    require_pointer(parameters, fn, "parameters");
    require_pointer(out, fn, "out");
    if (options && options->trained) invalid(std::string(fn) + ": `trained` applies to loading only");
    const int64_t total = parameter_total(*config);
    if (count != total)
      invalid(std::string(fn) + ": parameters must be float32 [" + std::to_string(total) +
              "], got " + std::to_string(count) + " values");
    lockstep::ModelOptions model_options = to_cpp(options);
    auto handle = std::make_unique<lockstep_model>();
    handle->model = lockstep::Model::from_parameters(
        to_cpp(*config), {parameters, static_cast<size_t>(count)}, model_options);
    *out = handle.release();
  });
}

void lockstep_model_free(lockstep_model* model) { delete model; }

lockstep_config lockstep_model_config(const lockstep_model* model) {
  return model ? to_c(model->model->config()) : lockstep_config{};
}
int64_t lockstep_model_parameter_count(const lockstep_model* model) {
  return model ? static_cast<int64_t>(model->model->parameters().size()) : 0;
}
const float* lockstep_model_parameters(const lockstep_model* model) {
  return model ? model->model->parameters().data() : nullptr;
}
const char* lockstep_model_parameters_sha256(const lockstep_model* model) {
  return model ? model->model->parameters_sha256().c_str() : "";
}
const char* lockstep_model_profile(const lockstep_model* model) {
  return model ? model->model->profile() : "";
}
const char* lockstep_model_weight_format(const lockstep_model* model) {
  return model ? model->model->weight_format().c_str() : "";
}
const char* lockstep_model_precision(const lockstep_model* model) {
  return model ? lockstep::precision_name(model->model->precision()) : "";
}

lockstep_status lockstep_model_logits(const lockstep_model* model, const int32_t* ids,
                                      int64_t rows, int64_t cols, const int32_t* lengths,
                                      float* logits, int64_t logits_count,
                                      const lockstep_call_options* call, lockstep_error* error) {
  return guarded(error, [&] {
    const char* fn = "lockstep_model_logits";
    require_pointer(model, fn, "model");
    require_pointer(ids, fn, "ids");
    require_pointer(logits, fn, "logits");
    const lockstep::Model& m = *model->model;
    check_capacity(m.config(), rows, cols, m.config().vocab_size, logits_count, fn, "logits");
    const std::vector<float> out =
        m.logits({ids, rows, cols}, lengths_span(lengths, rows), to_cpp(call));
    std::memcpy(logits, out.data(), out.size() * sizeof(float));
  });
}

lockstep_status lockstep_model_hidden(const lockstep_model* model, const int32_t* ids,
                                      int64_t rows, int64_t cols, const int32_t* lengths,
                                      float* hidden, int64_t hidden_count,
                                      const lockstep_call_options* call, lockstep_error* error) {
  return guarded(error, [&] {
    const char* fn = "lockstep_model_hidden";
    require_pointer(model, fn, "model");
    require_pointer(ids, fn, "ids");
    require_pointer(hidden, fn, "hidden");
    const lockstep::Model& m = *model->model;
    check_capacity(m.config(), rows, cols, m.config().d_model, hidden_count, fn, "hidden");
    const std::vector<float> out =
        m.hidden({ids, rows, cols}, lengths_span(lengths, rows), to_cpp(call));
    std::memcpy(hidden, out.data(), out.size() * sizeof(float));
  });
}

lockstep_status lockstep_model_next_bytes(const lockstep_model* model, const int32_t* ids,
                                          int64_t rows, int64_t cols, const int32_t* lengths,
                                          int32_t* next, int64_t next_count,
                                          const lockstep_call_options* call,
                                          lockstep_error* error) {
  return guarded(error, [&] {
    const char* fn = "lockstep_model_next_bytes";
    require_pointer(model, fn, "model");
    require_pointer(ids, fn, "ids");
    require_pointer(next, fn, "next");
    const lockstep::Model& m = *model->model;
    if (rows >= 1 && next_count < rows)
      invalid(std::string(fn) + ": next holds " + std::to_string(next_count) + " elements; " +
              std::to_string(rows) + " rows need " + std::to_string(rows));
    const std::vector<int32_t> out =
        m.next_bytes({ids, rows, cols}, lengths_span(lengths, rows), to_cpp(call));
    std::memcpy(next, out.data(), out.size() * sizeof(int32_t));
  });
}

lockstep_status lockstep_model_loss_bits(const lockstep_model* model, const int32_t* ids,
                                         int64_t rows, int64_t cols, uint32_t* loss_bits,
                                         const lockstep_call_options* call,
                                         lockstep_error* error) {
  return guarded(error, [&] {
    const char* fn = "lockstep_model_loss_bits";
    require_pointer(model, fn, "model");
    require_pointer(ids, fn, "ids");
    require_pointer(loss_bits, fn, "loss_bits");
    *loss_bits = model->model->loss_bits({ids, rows, cols}, to_cpp(call));
  });
}

lockstep_trainer_options lockstep_trainer_default_options(void) {
  const lockstep::TrainerOptions d;
  lockstep_trainer_options o;
  o.device = LOCKSTEP_DEVICE_DEFAULT;
  o.threads = 0;
  o.pool = nullptr;
  o.precision = LOCKSTEP_PRECISION_DEFAULT;
  o.lr = d.adamw.lr;
  o.beta1 = d.adamw.beta1;
  o.beta2 = d.adamw.beta2;
  o.eps = d.adamw.eps;
  o.weight_decay = d.adamw.weight_decay;
  o.clip_norm = d.adamw.clip_norm;
  o.ema_decay = d.ema_decay;
  return o;
}

lockstep_status lockstep_trainer_create(const lockstep_config* config, const float* parameters,
                                        int64_t count, const lockstep_trainer_options* options,
                                        lockstep_trainer** out, lockstep_error* error) {
  if (out) *out = nullptr;
  return guarded(error, [&] {
    const char* fn = "lockstep_trainer_create";
    require_pointer(config, fn, "config");
    require_pointer(parameters, fn, "parameters");
    require_pointer(out, fn, "out");
    const int64_t total = parameter_total(*config);
    if (count != total)
      invalid(std::string(fn) + ": parameters must hold " + std::to_string(total) +
              " float32 values, got " + std::to_string(count));
    auto* handle = new lockstep_trainer{lockstep::Trainer(
        to_cpp(*config), {parameters, static_cast<size_t>(count)}, to_cpp(options))};
    *out = handle;
  });
}

lockstep_status lockstep_trainer_from_state(const lockstep_config* config,
                                            const lockstep_trainer_state* state,
                                            const lockstep_trainer_options* options,
                                            lockstep_trainer** out, lockstep_error* error) {
  if (out) *out = nullptr;
  return guarded(error, [&] {
    const char* fn = "lockstep_trainer_from_state";
    require_pointer(config, fn, "config");
    require_pointer(state, fn, "state");
    require_pointer(state->parameters, fn, "state->parameters");
    require_pointer(state->m, fn, "state->m");
    require_pointer(state->v, fn, "state->v");
    require_pointer(out, fn, "out");
    const int64_t total = parameter_total(*config);
    if (state->count != total)
      invalid(std::string(fn) + ": the state must hold " + std::to_string(total) +
              " float32 values per array, got " + std::to_string(state->count));
    const size_t n = static_cast<size_t>(total);
    lockstep::TrainerState s;
    s.parameters.assign(state->parameters, state->parameters + n);
    s.m.assign(state->m, state->m + n);
    s.v.assign(state->v, state->v + n);
    if (state->ema) s.ema.assign(state->ema, state->ema + n);
    s.completed_steps = state->completed_steps;
    auto* handle = new lockstep_trainer{
        lockstep::Trainer::from_state(to_cpp(*config), std::move(s), to_cpp(options))};
    *out = handle;
  });
}

void lockstep_trainer_free(lockstep_trainer* trainer) { delete trainer; }

lockstep_status lockstep_trainer_step(lockstep_trainer* trainer, const int32_t* ids, int64_t rows,
                                      int64_t cols, uint32_t* loss_bits, lockstep_error* error) {
  return guarded(error, [&] {
    require_pointer(trainer, "lockstep_trainer_step", "trainer");
    require_pointer(ids, "lockstep_trainer_step", "ids");
    const uint32_t bits = trainer->trainer.train_step({ids, rows, cols});
    if (loss_bits) *loss_bits = bits;
  });
}

lockstep_status lockstep_trainer_loss_bits(lockstep_trainer* trainer, const int32_t* ids,
                                           int64_t rows, int64_t cols, uint32_t* loss_bits,
                                           lockstep_error* error) {
  return guarded(error, [&] {
    require_pointer(trainer, "lockstep_trainer_loss_bits", "trainer");
    require_pointer(ids, "lockstep_trainer_loss_bits", "ids");
    require_pointer(loss_bits, "lockstep_trainer_loss_bits", "loss_bits");
    *loss_bits = trainer->trainer.loss_bits({ids, rows, cols});
  });
}

lockstep_config lockstep_trainer_config(const lockstep_trainer* trainer) {
  return trainer ? to_c(trainer->trainer.config()) : lockstep_config{};
}
int64_t lockstep_trainer_parameter_count(const lockstep_trainer* trainer) {
  return trainer ? static_cast<int64_t>(trainer->trainer.parameters().size()) : 0;
}
int64_t lockstep_trainer_completed_steps(const lockstep_trainer* trainer) {
  return trainer ? trainer->trainer.completed_steps() : 0;
}
const float* lockstep_trainer_parameters(const lockstep_trainer* trainer) {
  return trainer ? trainer->trainer.parameters().data() : nullptr;
}
const float* lockstep_trainer_m(const lockstep_trainer* trainer) {
  return trainer ? trainer->trainer.m().data() : nullptr;
}
const float* lockstep_trainer_v(const lockstep_trainer* trainer) {
  return trainer ? trainer->trainer.v().data() : nullptr;
}
const float* lockstep_trainer_ema(const lockstep_trainer* trainer) {
  if (!trainer || trainer->trainer.ema().empty()) return nullptr;
  return trainer->trainer.ema().data();
}
const float* lockstep_trainer_gradient(const lockstep_trainer* trainer) {
  if (!trainer || trainer->trainer.gradient().empty()) return nullptr;
  return trainer->trainer.gradient().data();
}

lockstep_status lockstep_trainer_parameters_sha256(const lockstep_trainer* trainer, char* hex,
                                                   lockstep_error* error) {
  return guarded(error, [&] {
    require_pointer(trainer, "lockstep_trainer_parameters_sha256", "trainer");
    require_pointer(hex, "lockstep_trainer_parameters_sha256", "hex");
    const std::string digest = trainer->trainer.parameters_sha256();
    if (digest.size() + 1 != LOCKSTEP_SHA256_HEX_SIZE)
      throw Error(ErrorKind::internal, "a SHA-256 digest of " + std::to_string(digest.size()) + " hex digits");
    std::memcpy(hex, digest.c_str(), LOCKSTEP_SHA256_HEX_SIZE);
  });
}

lockstep_status lockstep_trainer_to_model(const lockstep_trainer* trainer,
                                          const lockstep_model_options* options,
                                          lockstep_model** out, lockstep_error* error) {
  if (out) *out = nullptr;
  return guarded(error, [&] {
    const char* fn = "lockstep_trainer_to_model";
    require_pointer(trainer, fn, "trainer");
    require_pointer(out, fn, "out");
    if (options && options->trained) invalid(std::string(fn) + ": `trained` applies to loading only");
    lockstep::ModelOptions model_options = to_cpp(options);
    if (!model_options.precision) model_options.precision = trainer->trainer.options().precision;
    auto handle = std::make_unique<lockstep_model>();
    handle->model = lockstep::Model::from_parameters(trainer->trainer.config(),
                                                     trainer->trainer.parameters(), model_options);
    *out = handle.release();
  });
}

}  // extern "C"
