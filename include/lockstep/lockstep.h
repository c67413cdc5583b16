/*
 * lockstep.h: the C API of liblockstep, for embedding a model from C or any language with a C
 * foreign-function interface.
 *
 * It is a thin layer over the C++ API (lockstep/model.hpp, lockstep/trainer.hpp) and gives the
 * same bits: a model's outputs are equal on every device, thread count and batch composition
 * (docs/ARITHMETIC.md).
 *
 * Conventions
 * -----------
 * - Handles are opaque: lockstep_model, lockstep_trainer, lockstep_thread_pool, lockstep_error.
 *   Each *_create / *_load function hands out a handle that the matching *_free releases;
 *   *_free(NULL) does nothing.
 * - Every function that can fail returns a lockstep_status and takes, last, a lockstep_error*
 *   that receives the status and a message naming what was wrong and where. That argument may be
 *   NULL (only the status is returned). An error object belongs to its caller: there is no global
 *   "last error", and two threads that use two error objects never see each other's messages.
 *   On success the error object is left as it was.
 * - On failure no output argument is written, except that a `*out` handle pointer is set to NULL.
 * - Besides the statuses each function lists, any function that returns a status may return
 *   LOCKSTEP_ERROR_OUT_OF_MEMORY (an allocation failed) or LOCKSTEP_ERROR_INTERNAL (a bug).
 * - Token ids are int32, row-major [rows, cols]. Outputs go to buffers the caller owns; each
 *   output buffer comes with its capacity in elements, and a buffer that is too small is refused
 *   with LOCKSTEP_ERROR_INVALID_ARGUMENT before anything is computed.
 * - Threads: a lockstep_model is immutable once made and may be called from several threads at
 *   once; each call allocates its own workspace. A lockstep_trainer changes with every step and
 *   must be used by one thread at a time. Several models (and trainers) may share one
 *   lockstep_thread_pool.
 * - Strings the library returns (const char*) are NUL-terminated and live as long as the handle
 *   they come from (or forever, for names that come from no handle).
 */
#ifndef LOCKSTEP_H
#define LOCKSTEP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define LOCKSTEP_API __attribute__((visibility("default")))
#else
#define LOCKSTEP_API
#endif

/* ---------------------------------------------------------------------------------------------
 * Status codes and errors
 * ------------------------------------------------------------------------------------------- */

typedef enum lockstep_status {
  LOCKSTEP_OK = 0,
  /* A value out of range or of the wrong shape: an id outside [0, vocab_size), a row length
   * outside the window, a thread count outside [1, 1024], a NULL where a pointer is required,
   * an output buffer too small, a bad model configuration. */
  LOCKSTEP_ERROR_INVALID_ARGUMENT = 1,
  /* A value of the wrong type (kept for parity with the C++ error kinds; the C API's own
   * arguments are typed, so it is rare here). */
  LOCKSTEP_ERROR_TYPE = 2,
  /* A file that is not what it claims to be: malformed model.json or safetensors, a checksum that
   * does not match, a model written for another arithmetic profile. */
  LOCKSTEP_ERROR_FORMAT = 3,
  /* The operating system refused: a missing file, a permission, a read error. */
  LOCKSTEP_ERROR_IO = 4,
  /* Something this build or this CPU lacks: a SIMD target it does not run, a remote checkpoint
   * location. */
  LOCKSTEP_ERROR_UNSUPPORTED = 5,
  /* The object cannot do this now: a training step whose loss or gradient is not finite (the
   * step is not applied). */
  LOCKSTEP_ERROR_STATE = 6,
  /* A broken invariant inside lockstep; please report it. */
  LOCKSTEP_ERROR_INTERNAL = 7,
  /* An allocation failed. */
  LOCKSTEP_ERROR_OUT_OF_MEMORY = 8
} lockstep_status;

/* "ok", "invalid argument", "type error", "format error", "I/O error", "unsupported",
 * "state error", "internal error", "out of memory"; "unknown status" for any other value. */
LOCKSTEP_API const char* lockstep_status_name(lockstep_status status);

typedef struct lockstep_error lockstep_error;

/* A new error object holding LOCKSTEP_OK and an empty message, or NULL when memory is short. */
LOCKSTEP_API lockstep_error* lockstep_error_create(void);
LOCKSTEP_API void lockstep_error_free(lockstep_error* error);
/* Back to LOCKSTEP_OK and an empty message. */
LOCKSTEP_API void lockstep_error_clear(lockstep_error* error);
/* The status of the last failure recorded in `error` (LOCKSTEP_OK when none or error is NULL). */
LOCKSTEP_API lockstep_status lockstep_error_status(const lockstep_error* error);
/* Its message ("" when none); valid until `error` is next written, cleared or freed. */
LOCKSTEP_API const char* lockstep_error_message(const lockstep_error* error);
/* Its stable code when it has one ("LS-INFER-001", "LS-LOAD-001"; docs/FORMAT.md), else "". */
LOCKSTEP_API const char* lockstep_error_code(const lockstep_error* error);

/* ---------------------------------------------------------------------------------------------
 * Library facts
 * ------------------------------------------------------------------------------------------- */

#define LOCKSTEP_VERSION_STRING "0.1.0"
/* LOCKSTEP_VERSION_STRING of the library linked, which may be newer than this header. */
LOCKSTEP_API const char* lockstep_version(void);
/* The arithmetic profile this build computes ("lockstep-f32-1"); a model written for another is
 * refused when loaded. */
LOCKSTEP_API const char* lockstep_profile_name(void);
/* One per physical core available to this process (affinity and cgroup quota respected). */
LOCKSTEP_API int lockstep_default_thread_count(void);

/* Where a call runs. DEFAULT: the model's (or trainer's) own setting, which itself defaults to
 * CPU. Every device gives the same bits. */
typedef enum lockstep_device {
  LOCKSTEP_DEVICE_DEFAULT = 0,
  LOCKSTEP_DEVICE_CPU = 1,       /* SIMD kernels on the thread pool */
  LOCKSTEP_DEVICE_REFERENCE = 2  /* single-threaded scalar kernels: docs/ARITHMETIC.md in code */
} lockstep_device;

/* Matmul precision. DEFAULT: what model.json says (f32 for a model built from parameters). */
typedef enum lockstep_precision {
  LOCKSTEP_PRECISION_DEFAULT = 0,
  LOCKSTEP_PRECISION_F32 = 1,
  LOCKSTEP_PRECISION_BF16 = 2
} lockstep_precision;

/* ---------------------------------------------------------------------------------------------
 * Model configuration
 * ------------------------------------------------------------------------------------------- */

/* The dimensions of a model (lockstep/config.hpp, ModelConfig). */
typedef struct lockstep_config {
  int32_t vocab_size; /* ids are in [0, vocab_size); 256: byte values */
  int32_t length;     /* the window: most positions one row holds */
  int32_t d_model;
  int32_t n_layers;
  int32_t n_heads;
  int32_t n_kv_heads; /* divides n_heads */
  int32_t d_ff;       /* SwiGLU hidden width */
  float norm_eps;
  float rope_theta;
  int32_t batch;      /* rows of the training batch: loss and training take ids [batch, length + 1] */
} lockstep_config;

/* The default dimensions (vocab 256, length 256, d_model 128, 4 layers, 4 heads, d_ff 384, ...). */
LOCKSTEP_API lockstep_config lockstep_config_default(void);
/* LOCKSTEP_OK, or LOCKSTEP_ERROR_INVALID_ARGUMENT naming the first field out of range. */
LOCKSTEP_API lockstep_status lockstep_config_validate(const lockstep_config* config,
                                                      lockstep_error* error);
/* The number of float32 parameters of a valid configuration, in *count.
 * LOCKSTEP_ERROR_INVALID_ARGUMENT: config or count NULL, or the configuration is invalid. */
LOCKSTEP_API lockstep_status lockstep_config_parameter_count(const lockstep_config* config,
                                                             int64_t* count,
                                                             lockstep_error* error);

/* ---------------------------------------------------------------------------------------------
 * Thread pools
 * ------------------------------------------------------------------------------------------- */

typedef struct lockstep_thread_pool lockstep_thread_pool;

/* Worker threads that several models and trainers may share. `threads`: 1..1024, or 0 for one
 * per physical core. Models keep the pool alive while they use it, so the handle may be freed
 * before them.
 * LOCKSTEP_ERROR_INVALID_ARGUMENT: `threads` out of range or `out` NULL.
 * LOCKSTEP_ERROR_OUT_OF_MEMORY, LOCKSTEP_ERROR_INTERNAL: the threads could not be started. */
LOCKSTEP_API lockstep_status lockstep_thread_pool_create(int threads, lockstep_thread_pool** out,
                                                         lockstep_error* error);
LOCKSTEP_API void lockstep_thread_pool_free(lockstep_thread_pool* pool);
/* Its number of threads (0 for NULL). */
LOCKSTEP_API int lockstep_thread_pool_size(const lockstep_thread_pool* pool);

/* ---------------------------------------------------------------------------------------------
 * Models
 * ------------------------------------------------------------------------------------------- */

typedef struct lockstep_model lockstep_model;

/* How a model is built and what its calls do by default. Start from
 * lockstep_model_default_options() and change the fields you need. */
typedef struct lockstep_model_options {
  lockstep_device device;       /* default device of calls (DEFAULT: CPU) */
  int threads;                  /* default thread count of calls, 1..1024; 0: the pool's size */
  lockstep_precision precision; /* override the model's own precision (DEFAULT: keep it) */
  lockstep_thread_pool* pool;   /* share this pool; NULL: the model makes its own on first use */
  const char* simd_target;      /* NULL or "": the best this CPU runs; else "AVX2", "portable", ... */
  int trained;                  /* load only: nonzero reads a checkpoint's trained weights
                                 * instead of its EMA averages */
} lockstep_model_options;

LOCKSTEP_API lockstep_model_options lockstep_model_default_options(void);

/* Loads the model `path` names: a model directory, a checkpoint step directory
 * (.../step-00000200), a checkpoint location (its newest complete step) or a model.json file.
 * `options` may be NULL (the defaults). Every check `lockstep inspect` makes is made.
 * LOCKSTEP_ERROR_INVALID_ARGUMENT: path or out NULL, a path that names none of the above, a bad
 *   option (threads out of range, `trained` for a model directory).
 * LOCKSTEP_ERROR_IO: a file is missing or unreadable.
 * LOCKSTEP_ERROR_FORMAT: model.json or the weights are malformed or fail their checksum, or the
 *   model was written for another arithmetic profile. A frozen :load parameter whose file is gone
 *   (IO) or changed (FORMAT) has the code LS-LOAD-001 (lockstep_error_code).
 * LOCKSTEP_ERROR_UNSUPPORTED: a remote location, a SIMD target this CPU lacks. */
LOCKSTEP_API lockstep_status lockstep_model_load(const char* path,
                                                 const lockstep_model_options* options,
                                                 lockstep_model** out, lockstep_error* error);

/* A model from flat float32 parameters in registry order (lockstep/config.hpp), copied.
 * `count` must be the configuration's parameter count and every value finite.
 * LOCKSTEP_ERROR_INVALID_ARGUMENT: a NULL pointer, an invalid configuration, a wrong count, a
 *   non-finite value, a bad option. LOCKSTEP_ERROR_UNSUPPORTED: an unknown SIMD target. */
LOCKSTEP_API lockstep_status lockstep_model_from_parameters(const lockstep_config* config,
                                                            const float* parameters, int64_t count,
                                                            const lockstep_model_options* options,
                                                            lockstep_model** out,
                                                            lockstep_error* error);

LOCKSTEP_API void lockstep_model_free(lockstep_model* model);

/* Facts about a model; none can fail for a non-NULL model. */
LOCKSTEP_API lockstep_config lockstep_model_config(const lockstep_model* model);
LOCKSTEP_API int64_t lockstep_model_parameter_count(const lockstep_model* model);
/* Flat float32 parameters in registry order, lockstep_model_parameter_count() of them. */
LOCKSTEP_API const float* lockstep_model_parameters(const lockstep_model* model);
/* SHA-256 of the parameters' little-endian float32 bytes, 64 lowercase hex digits. */
LOCKSTEP_API const char* lockstep_model_parameters_sha256(const lockstep_model* model);
/* The arithmetic profile the model computes. */
LOCKSTEP_API const char* lockstep_model_profile(const lockstep_model* model);
/* "float32", or the packed format the weights were read from. */
LOCKSTEP_API const char* lockstep_model_weight_format(const lockstep_model* model);
/* "f32" or "bf16". */
LOCKSTEP_API const char* lockstep_model_precision(const lockstep_model* model);

/* Per-call settings; pass NULL for the model's defaults. */
typedef struct lockstep_call_options {
  lockstep_device device; /* DEFAULT: the model's */
  int threads;            /* 1..1024 (at most the pool's size is used); 0: the model's */
} lockstep_call_options;

LOCKSTEP_API lockstep_call_options lockstep_call_default_options(void);

/* The forward calls. Common rules:
 * - ids: [rows, cols] with rows >= 1 and 1 <= cols <= config.length; every id read must be in
 *   [0, vocab_size).
 * - lengths: NULL, or one length per row in [1, cols]. Row r is then real at [0, lengths[r]) and
 *   padding after: its padding ids are not read, its real positions get exactly the outputs of
 *   the row alone, and its padding outputs are +0.0.
 * - Results do not depend on the device, the thread count or the other rows of the batch.
 * Returns LOCKSTEP_OK, or:
 *   LOCKSTEP_ERROR_INVALID_ARGUMENT: a NULL pointer, a bad shape, an id out of range (the message
 *     names its row and position), a bad length, a thread count outside [1, 1024], an output
 *     capacity too small;
 *   LOCKSTEP_ERROR_OUT_OF_MEMORY; LOCKSTEP_ERROR_INTERNAL. */

/* Float32 logits [rows, cols, vocab_size] into `logits` (capacity `logits_count` floats). */
LOCKSTEP_API lockstep_status lockstep_model_logits(const lockstep_model* model, const int32_t* ids,
                                                   int64_t rows, int64_t cols,
                                                   const int32_t* lengths, float* logits,
                                                   int64_t logits_count,
                                                   const lockstep_call_options* call,
                                                   lockstep_error* error);

/* The final normalised hidden state [rows, cols, d_model] into `hidden` (capacity
 * `hidden_count` floats). */
LOCKSTEP_API lockstep_status lockstep_model_hidden(const lockstep_model* model, const int32_t* ids,
                                                   int64_t rows, int64_t cols,
                                                   const int32_t* lengths, float* hidden,
                                                   int64_t hidden_count,
                                                   const lockstep_call_options* call,
                                                   lockstep_error* error);

/* The greedy next token after each row's last (real) position into `next` (capacity
 * `next_count` >= rows): the highest logit, ties going to the lowest id, NaN never chosen. */
LOCKSTEP_API lockstep_status lockstep_model_next_bytes(const lockstep_model* model,
                                                       const int32_t* ids, int64_t rows,
                                                       int64_t cols, const int32_t* lengths,
                                                       int32_t* next, int64_t next_count,
                                                       const lockstep_call_options* call,
                                                       lockstep_error* error);

/* The IEEE-754 bits of the mean next-token loss over ids [config.batch, config.length + 1] (the
 * training layout: columns [0, length) are inputs, [1, length] targets; -100 in the last column
 * is ignored), into *loss_bits. Compare the bits, not the float. */
LOCKSTEP_API lockstep_status lockstep_model_loss_bits(const lockstep_model* model,
                                                      const int32_t* ids, int64_t rows,
                                                      int64_t cols, uint32_t* loss_bits,
                                                      const lockstep_call_options* call,
                                                      lockstep_error* error);

/* ---------------------------------------------------------------------------------------------
 * Training
 * ------------------------------------------------------------------------------------------- */

typedef struct lockstep_trainer lockstep_trainer;

/* How a trainer steps. Start from lockstep_trainer_default_options(). */
typedef struct lockstep_trainer_options {
  lockstep_device device;       /* DEFAULT: CPU; every device gives the same bits */
  int threads;                  /* 1..1024; 0: one per physical core (or the pool's size) */
  lockstep_thread_pool* pool;   /* share this pool; NULL: the trainer makes its own */
  lockstep_precision precision; /* DEFAULT: f32; BF16 rounds matmul operands, f32 master weights */
  float lr;                     /* AdamW: lr > 0 finite */
  float beta1, beta2;           /* in [0, 1) */
  float eps;                    /* > 0 finite */
  float weight_decay;           /* >= 0, decoupled */
  float clip_norm;              /* > 0: clip the gradient's global L2 norm; 0: no clipping */
  float ema_decay;              /* in (0, 1): keep an EMA of the weights; 0: none */
} lockstep_trainer_options;

LOCKSTEP_API lockstep_trainer_options lockstep_trainer_default_options(void);

/* A trainer starting from flat float32 parameters (`count` of them, registry order): moments
 * zero, step 0. `options` may be NULL.
 * LOCKSTEP_ERROR_INVALID_ARGUMENT: a NULL pointer, an invalid configuration, a wrong count, a
 * non-finite value, an option out of range. */
LOCKSTEP_API lockstep_status lockstep_trainer_create(const lockstep_config* config,
                                                     const float* parameters, int64_t count,
                                                     const lockstep_trainer_options* options,
                                                     lockstep_trainer** out,
                                                     lockstep_error* error);

/* A recorded state to resume: `count` floats each of parameters, m and v (and ema, or NULL:
 * the parameters, when the options keep an EMA; it must be NULL when they keep none). */
typedef struct lockstep_trainer_state {
  const float* parameters;
  const float* m;
  const float* v;
  const float* ema;
  int64_t count;
  int64_t completed_steps;
} lockstep_trainer_state;

/* A trainer resuming `state` (copied). LOCKSTEP_ERROR_INVALID_ARGUMENT: as for
 * lockstep_trainer_create, and a negative v or completed_steps. */
LOCKSTEP_API lockstep_status lockstep_trainer_from_state(const lockstep_config* config,
                                                         const lockstep_trainer_state* state,
                                                         const lockstep_trainer_options* options,
                                                         lockstep_trainer** out,
                                                         lockstep_error* error);

LOCKSTEP_API void lockstep_trainer_free(lockstep_trainer* trainer);

/* One AdamW step on ids [config.batch, config.length + 1] (the loss layout), writing the bits of
 * the loss before the update to *loss_bits (which may be NULL).
 * On success the parameters, moments, EMA and step count advance and the gradient is this
 * step's. On failure none of them move and the gradient is cleared:
 *   LOCKSTEP_ERROR_INVALID_ARGUMENT: a NULL trainer or ids, a bad shape, an id out of range;
 *   LOCKSTEP_ERROR_STATE: the loss or the gradient is not finite;
 *   LOCKSTEP_ERROR_OUT_OF_MEMORY; LOCKSTEP_ERROR_INTERNAL. */
LOCKSTEP_API lockstep_status lockstep_trainer_step(lockstep_trainer* trainer, const int32_t* ids,
                                                   int64_t rows, int64_t cols,
                                                   uint32_t* loss_bits, lockstep_error* error);

/* The bits of the mean loss of ids [batch, length + 1] under the current parameters, without
 * training; nothing changes.
 * LOCKSTEP_ERROR_INVALID_ARGUMENT: a NULL pointer, a bad shape, an id out of range. */
LOCKSTEP_API lockstep_status lockstep_trainer_loss_bits(lockstep_trainer* trainer,
                                                        const int32_t* ids, int64_t rows,
                                                        int64_t cols, uint32_t* loss_bits,
                                                        lockstep_error* error);

/* The trainer's state. Arrays hold lockstep_trainer_parameter_count() floats in registry order
 * and stay valid until the next step, loss or free of the trainer. */
LOCKSTEP_API lockstep_config lockstep_trainer_config(const lockstep_trainer* trainer);
LOCKSTEP_API int64_t lockstep_trainer_parameter_count(const lockstep_trainer* trainer);
LOCKSTEP_API int64_t lockstep_trainer_completed_steps(const lockstep_trainer* trainer);
LOCKSTEP_API const float* lockstep_trainer_parameters(const lockstep_trainer* trainer);
LOCKSTEP_API const float* lockstep_trainer_m(const lockstep_trainer* trainer);
LOCKSTEP_API const float* lockstep_trainer_v(const lockstep_trainer* trainer);
/* NULL without EMA. */
LOCKSTEP_API const float* lockstep_trainer_ema(const lockstep_trainer* trainer);
/* The last step's gradient; NULL before any step and after a failed one. */
LOCKSTEP_API const float* lockstep_trainer_gradient(const lockstep_trainer* trainer);

/* SHA-256 of the parameters' little-endian float32 bytes as 64 hex digits and a NUL, written to
 * `hex` (LOCKSTEP_SHA256_HEX_SIZE chars). LOCKSTEP_ERROR_INVALID_ARGUMENT: a NULL pointer. */
#define LOCKSTEP_SHA256_HEX_SIZE 65
LOCKSTEP_API lockstep_status lockstep_trainer_parameters_sha256(const lockstep_trainer* trainer,
                                                                char* hex, lockstep_error* error);

/* A model of the trainer's current parameters (f32 or bf16 as the trainer computes), with
 * `options` (NULL: defaults). Errors as for lockstep_model_from_parameters. */
LOCKSTEP_API lockstep_status lockstep_trainer_to_model(const lockstep_trainer* trainer,
                                                       const lockstep_model_options* options,
                                                       lockstep_model** out,
                                                       lockstep_error* error);

#ifdef __cplusplus
}
#endif

#endif /* LOCKSTEP_H */
