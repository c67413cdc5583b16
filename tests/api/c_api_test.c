/* The C API, compiled as C11 and linked against liblockstep.so: statuses and error objects,
 * loading, the forward calls (devices, threads, ragged rows and their padding), refusals that
 * leave outputs untouched, a shared pool, and the trainer (a failed step leaves the state as it
 * was; a resumed state steps to the same bits).
 *
 *   test_c_api MODEL    (a model directory made by `lockstep init`, batch >= 2, length >= 8)
 *
 * Exits 1 when any check fails, listing each failure. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lockstep/lockstep.h"

static int failures = 0;

#define CHECK(cond)                                                 \
  do {                                                              \
    if (!(cond)) {                                                  \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                   \
    }                                                               \
  } while (0)

/* The call succeeded; print the error's message when it did not. */
#define CHECK_OK(call, err)                                                              \
  do {                                                                                   \
    lockstep_status s_ = (call);                                                         \
    if (s_ != LOCKSTEP_OK) {                                                             \
      fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call,                \
              lockstep_status_name(s_), lockstep_error_message(err));                    \
      ++failures;                                                                        \
    }                                                                                    \
  } while (0)

static int contains(const char* text, const char* part) { return strstr(text, part) != NULL; }

static void* checked_malloc(size_t bytes) {
  void* p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return p;
}

/* Deterministic ids in [0, 256). */
static void fill_ids(int32_t* ids, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1u;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    ids[i] = (int32_t)(x >> 24);
  }
}

static void test_errors(void) {
  CHECK(strcmp(lockstep_status_name(LOCKSTEP_OK), "ok") == 0);
  CHECK(strcmp(lockstep_status_name(LOCKSTEP_ERROR_IO), "I/O error") == 0);
  CHECK(strcmp(lockstep_status_name((lockstep_status)99), "unknown status") == 0);
  CHECK(strcmp(lockstep_version(), LOCKSTEP_VERSION_STRING) == 0);
  CHECK(strlen(lockstep_profile_name()) > 0);
  CHECK(lockstep_default_thread_count() >= 1);

  lockstep_error* err = lockstep_error_create();
  CHECK(err != NULL);
  CHECK(lockstep_error_status(err) == LOCKSTEP_OK);
  CHECK(strcmp(lockstep_error_message(err), "") == 0);
  CHECK(lockstep_error_status(NULL) == LOCKSTEP_OK);
  CHECK(strcmp(lockstep_error_message(NULL), "") == 0);

  /* A bad configuration names its field. */
  lockstep_config c = lockstep_config_default();
  CHECK_OK(lockstep_config_validate(&c, err), err);
  c.n_heads = 3;
  CHECK(lockstep_config_validate(&c, err) == LOCKSTEP_ERROR_INVALID_ARGUMENT);
  CHECK(lockstep_error_status(err) == LOCKSTEP_ERROR_INVALID_ARGUMENT);
  CHECK(contains(lockstep_error_message(err), "n_heads"));
  /* A NULL error object: the status alone. */
  CHECK(lockstep_config_validate(&c, NULL) == LOCKSTEP_ERROR_INVALID_ARGUMENT);
  CHECK(lockstep_config_validate(NULL, err) == LOCKSTEP_ERROR_INVALID_ARGUMENT);
  CHECK(contains(lockstep_error_message(err), "config is NULL"));
  lockstep_error_clear(err);
  CHECK(lockstep_error_status(err) == LOCKSTEP_OK);
  CHECK(strcmp(lockstep_error_message(err), "") == 0);

  int64_t count = -1;
  c = lockstep_config_default();
  CHECK_OK(lockstep_config_parameter_count(&c, &count, err), err);
  CHECK(count == 918656); /* the default model: README's `lockstep init` line */

  /* Loading: a missing path is an I/O error and leaves *out NULL. */
  lockstep_model* model = (lockstep_model*)&count; /* anything non-NULL */
  CHECK(lockstep_model_load("/nonexistent/lockstep-model", NULL, &model, err) == LOCKSTEP_ERROR_IO);
  CHECK(model == NULL);
  CHECK(contains(lockstep_error_message(err), "/nonexistent/lockstep-model"));
  CHECK(lockstep_model_load(NULL, NULL, &model, err) == LOCKSTEP_ERROR_INVALID_ARGUMENT);

  lockstep_thread_pool* pool = NULL;
  CHECK(lockstep_thread_pool_create(2000, &pool, err) == LOCKSTEP_ERROR_INVALID_ARGUMENT);
  CHECK(pool == NULL);
  CHECK(lockstep_thread_pool_size(NULL) == 0);

  lockstep_model_free(NULL);
  lockstep_trainer_free(NULL);
  lockstep_thread_pool_free(NULL);
  lockstep_error_free(NULL);
  lockstep_error_free(err);
}

static void test_model(const char* path) {
  lockstep_error* err = lockstep_error_create();
  lockstep_model* model = NULL;
  CHECK_OK(lockstep_model_load(path, NULL, &model, err), err);
  if (!model) {
    lockstep_error_free(err);
    return;
  }
  const lockstep_config c = lockstep_model_config(model);
  CHECK(c.vocab_size == 256);
  CHECK(c.batch >= 2 && c.length >= 8);
  CHECK(strlen(lockstep_model_parameters_sha256(model)) == 64);
  CHECK(strcmp(lockstep_model_profile(model), lockstep_profile_name()) == 0);
  CHECK(strcmp(lockstep_model_weight_format(model), "float32") == 0);
  CHECK(strcmp(lockstep_model_precision(model), "f32") == 0);

  /* The same parameters in memory make the same model. */
  lockstep_model* copy = NULL;
  CHECK_OK(lockstep_model_from_parameters(&c, lockstep_model_parameters(model),
                                          lockstep_model_parameter_count(model), NULL, &copy, err),
           err);
  if (copy) {
    CHECK(strcmp(lockstep_model_parameters_sha256(copy), lockstep_model_parameters_sha256(model)) == 0);
    lockstep_model_free(copy);
  }
  copy = NULL;
  CHECK(lockstep_model_from_parameters(&c, lockstep_model_parameters(model), 3, NULL, &copy, err) ==
        LOCKSTEP_ERROR_INVALID_ARGUMENT);
  CHECK(copy == NULL);

  const int64_t rows = 3, cols = c.length, V = c.vocab_size;
  const size_t n_ids = (size_t)(rows * cols), n_logits = (size_t)(rows * cols * V);
  int32_t* ids = checked_malloc(n_ids * sizeof(int32_t));
  fill_ids(ids, n_ids, 7);
  float* cpu = checked_malloc(n_logits * sizeof(float));
  float* ref = checked_malloc(n_logits * sizeof(float));
  float* alone = checked_malloc((size_t)(cols * V) * sizeof(float));

  /* Reference and cpu at several thread counts: the same bits. */
  lockstep_call_options call = lockstep_call_default_options();
  call.device = LOCKSTEP_DEVICE_REFERENCE;
  CHECK_OK(lockstep_model_logits(model, ids, rows, cols, NULL, ref, (int64_t)n_logits, &call, err), err);
  for (int threads = 1; threads <= 3; ++threads) {
    call.device = LOCKSTEP_DEVICE_CPU;
    call.threads = threads;
    memset(cpu, 0xff, n_logits * sizeof(float));
    CHECK_OK(lockstep_model_logits(model, ids, rows, cols, NULL, cpu, (int64_t)n_logits, &call, err), err);
    CHECK(memcmp(cpu, ref, n_logits * sizeof(float)) == 0);
  }

  /* Ragged rows: real positions equal the row alone at its own length; padding is +0.0. */
  int32_t lengths[3] = {(int32_t)cols, 1, (int32_t)(cols / 2)};
  for (int64_t r = 0; r < rows; ++r) ids[r * cols + cols - 1] = (r == 0) ? ids[r * cols + cols - 1] : 999; /* padding is not read */
  CHECK_OK(lockstep_model_logits(model, ids, rows, cols, lengths, cpu, (int64_t)n_logits, NULL, err), err);
  for (int64_t r = 0; r < rows; ++r) {
    CHECK_OK(lockstep_model_logits(model, ids + r * cols, 1, lengths[r], NULL, alone, cols * V, NULL, err), err);
    CHECK(memcmp(cpu + r * cols * V, alone, (size_t)(lengths[r] * V) * sizeof(float)) == 0);
    int padding_zero = 1;
    for (int64_t i = lengths[r] * V; i < cols * V; ++i) {
      uint32_t bits;
      memcpy(&bits, &cpu[r * cols * V + i], sizeof(bits));
      padding_zero &= bits == 0u;
    }
    CHECK(padding_zero);
  }

  /* next_bytes: the argmax of the last real position's logits, ties to the lowest id. */
  int32_t next[3] = {-1, -1, -1};
  CHECK_OK(lockstep_model_next_bytes(model, ids, rows, cols, lengths, next, 3, NULL, err), err);
  for (int64_t r = 0; r < rows; ++r) {
    const float* last = cpu + (r * cols + lengths[r] - 1) * V;
    int32_t best = 0;
    for (int32_t v = 1; v < V; ++v)
      if (last[v] > last[best]) best = v;
    CHECK(next[r] == best);
  }

  /* hidden: [rows, cols, d_model], equal on both devices. */
  const size_t n_hidden = (size_t)(rows * cols * c.d_model);
  float* h_cpu = checked_malloc(n_hidden * sizeof(float));
  float* h_ref = checked_malloc(n_hidden * sizeof(float));
  call = lockstep_call_default_options();
  call.device = LOCKSTEP_DEVICE_REFERENCE;
  CHECK_OK(lockstep_model_hidden(model, ids, rows, cols, lengths, h_ref, (int64_t)n_hidden, &call, err), err);
  CHECK_OK(lockstep_model_hidden(model, ids, rows, cols, lengths, h_cpu, (int64_t)n_hidden, NULL, err), err);
  CHECK(memcmp(h_cpu, h_ref, n_hidden * sizeof(float)) == 0);

  /* Refusals: each names what is wrong, and the output is untouched. */
  fill_ids(ids, n_ids, 7); /* no padding ids out of range from here on */
  memset(cpu, 0x5a, n_logits * sizeof(float));
  const int32_t kept = ids[3];
  ids[3] = 300;
  CHECK(lockstep_model_logits(model, ids, rows, cols, NULL, cpu, (int64_t)n_logits, NULL, err) ==
        LOCKSTEP_ERROR_INVALID_ARGUMENT);
  CHECK(contains(lockstep_error_message(err), "got 300 at row 0, position 3"));
  CHECK(((unsigned char*)cpu)[0] == 0x5a);
  ids[3] = kept;
  CHECK(lockstep_model_logits(model, ids, rows, cols, NULL, cpu, (int64_t)n_logits - 1, NULL, err) ==
        LOCKSTEP_ERROR_INVALID_ARGUMENT);
  CHECK(contains(lockstep_error_message(err), "logits holds"));
  CHECK(lockstep_model_logits(model, ids, rows, cols + 1, NULL, cpu, (int64_t)n_logits, NULL, err) ==
        LOCKSTEP_ERROR_INVALID_ARGUMENT);
  CHECK(lockstep_model_logits(model, ids, 0, cols, NULL, cpu, (int64_t)n_logits, NULL, err) ==
        LOCKSTEP_ERROR_INVALID_ARGUMENT);
  lengths[1] = 0;
  CHECK(lockstep_model_next_bytes(model, ids, rows, cols, lengths, next, 3, NULL, err) ==
        LOCKSTEP_ERROR_INVALID_ARGUMENT);
  CHECK(contains(lockstep_error_message(err), "lengths[1]"));
  CHECK(lockstep_model_next_bytes(model, ids, rows, cols, NULL, next, 2, NULL, err) ==
        LOCKSTEP_ERROR_INVALID_ARGUMENT);
  call = lockstep_call_default_options();
  call.threads = 2000;
  CHECK(lockstep_model_next_bytes(model, ids, rows, cols, NULL, next, 3, &call, err) ==
        LOCKSTEP_ERROR_INVALID_ARGUMENT);
  CHECK(contains(lockstep_error_message(err), "threads"));
  call = lockstep_call_default_options();
  call.device = (lockstep_device)7;
  CHECK(lockstep_model_next_bytes(model, ids, rows, cols, NULL, next, 3, &call, err) ==
        LOCKSTEP_ERROR_INVALID_ARGUMENT);
  CHECK(lockstep_model_logits(NULL, ids, rows, cols, NULL, cpu, (int64_t)n_logits, NULL, err) ==
        LOCKSTEP_ERROR_INVALID_ARGUMENT);
  CHECK(contains(lockstep_error_message(err), "model is NULL"));

  /* The loss: [batch, length + 1], -100 allowed in the last column only. */
  const int64_t lrows = c.batch, lcols = c.length + 1;
  int32_t* batch = checked_malloc((size_t)(lrows * lcols) * sizeof(int32_t));
  fill_ids(batch, (size_t)(lrows * lcols), 11);
  batch[lcols - 1] = -100;
  uint32_t loss_cpu = 0, loss_ref = 1;
  call = lockstep_call_default_options();
  call.device = LOCKSTEP_DEVICE_REFERENCE;
  CHECK_OK(lockstep_model_loss_bits(model, batch, lrows, lcols, &loss_ref, &call, err), err);
  CHECK_OK(lockstep_model_loss_bits(model, batch, lrows, lcols, &loss_cpu, NULL, err), err);
  CHECK(loss_cpu == loss_ref);
  float loss;
  memcpy(&loss, &loss_cpu, sizeof(loss));
  CHECK(isfinite(loss) && loss > 0.0f);
  batch[0] = -100;
  CHECK(lockstep_model_loss_bits(model, batch, lrows, lcols, &loss_cpu, NULL, err) ==
        LOCKSTEP_ERROR_INVALID_ARGUMENT);
  CHECK(contains(lockstep_error_message(err), "got -100 at row 0, position 0"));
  batch[0] = 1;
  CHECK(lockstep_model_loss_bits(model, batch, lrows, lcols - 1, &loss_cpu, NULL, err) ==
        LOCKSTEP_ERROR_INVALID_ARGUMENT);

  /* Two models sharing one pool; the pool handle may go before them. */
  lockstep_thread_pool* pool = NULL;
  CHECK_OK(lockstep_thread_pool_create(2, &pool, err), err);
  CHECK(lockstep_thread_pool_size(pool) == 2);
  lockstep_model_options options = lockstep_model_default_options();
  options.pool = pool;
  lockstep_model* a = NULL;
  lockstep_model* b = NULL;
  CHECK_OK(lockstep_model_load(path, &options, &a, err), err);
  CHECK_OK(lockstep_model_from_parameters(&c, lockstep_model_parameters(model),
                                          lockstep_model_parameter_count(model), &options, &b, err),
           err);
  lockstep_thread_pool_free(pool);
  if (a && b) {
    CHECK_OK(lockstep_model_logits(a, ids, rows, cols, NULL, cpu, (int64_t)n_logits, NULL, err), err);
    CHECK(memcmp(cpu, ref, n_logits * sizeof(float)) == 0);
    CHECK_OK(lockstep_model_logits(b, ids, rows, cols, NULL, cpu, (int64_t)n_logits, NULL, err), err);
    CHECK(memcmp(cpu, ref, n_logits * sizeof(float)) == 0);
  }
  lockstep_model_free(a);
  lockstep_model_free(b);
  options = lockstep_model_default_options();
  options.simd_target = "no-such-target";
  CHECK(lockstep_model_load(path, &options, &a, err) == LOCKSTEP_ERROR_UNSUPPORTED);
  options = lockstep_model_default_options();
  options.trained = 1; /* a model directory has no trained weights apart from its own */
  CHECK(lockstep_model_load(path, &options, &a, err) == LOCKSTEP_ERROR_INVALID_ARGUMENT);
  CHECK(a == NULL);

  free(ids);
  free(cpu);
  free(ref);
  free(alone);
  free(h_cpu);
  free(h_ref);
  free(batch);
  lockstep_model_free(model);
  lockstep_error_free(err);
}

static int same_floats(const float* a, const float* b, int64_t n) {
  return a && b && memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

static void test_trainer(const char* path) {
  lockstep_error* err = lockstep_error_create();
  lockstep_model* model = NULL;
  CHECK_OK(lockstep_model_load(path, NULL, &model, err), err);
  if (!model) {
    lockstep_error_free(err);
    return;
  }
  const lockstep_config c = lockstep_model_config(model);
  const int64_t n = lockstep_model_parameter_count(model);
  const int64_t rows = c.batch, cols = c.length + 1;
  int32_t* ids = checked_malloc((size_t)(rows * cols) * sizeof(int32_t));
  fill_ids(ids, (size_t)(rows * cols), 23);

  lockstep_trainer* trainer = NULL;
  lockstep_trainer_options options = lockstep_trainer_default_options();
  CHECK_OK(lockstep_trainer_create(&c, lockstep_model_parameters(model), n, &options, &trainer, err), err);
  if (!trainer) {
    free(ids);
    lockstep_model_free(model);
    lockstep_error_free(err);
    return;
  }
  CHECK(lockstep_trainer_completed_steps(trainer) == 0);
  CHECK(lockstep_trainer_gradient(trainer) == NULL);
  CHECK(lockstep_trainer_ema(trainer) == NULL);
  char hex[LOCKSTEP_SHA256_HEX_SIZE];
  CHECK_OK(lockstep_trainer_parameters_sha256(trainer, hex, err), err);
  CHECK(strcmp(hex, lockstep_model_parameters_sha256(model)) == 0);

  /* The trainer's loss before a step is the model's. */
  uint32_t trainer_loss = 0, model_loss = 1, step_loss = 2;
  CHECK_OK(lockstep_trainer_loss_bits(trainer, ids, rows, cols, &trainer_loss, err), err);
  CHECK_OK(lockstep_model_loss_bits(model, ids, rows, cols, &model_loss, NULL, err), err);
  CHECK(trainer_loss == model_loss);
  CHECK_OK(lockstep_trainer_step(trainer, ids, rows, cols, &step_loss, err), err);
  CHECK(step_loss == model_loss);
  CHECK(lockstep_trainer_completed_steps(trainer) == 1);
  CHECK(lockstep_trainer_gradient(trainer) != NULL);
  CHECK_OK(lockstep_trainer_parameters_sha256(trainer, hex, err), err);
  CHECK(strcmp(hex, lockstep_model_parameters_sha256(model)) != 0);

  /* Record the state, then fail a step: nothing moves, the gradient is cleared. */
  float* p = checked_malloc((size_t)n * sizeof(float));
  float* m = checked_malloc((size_t)n * sizeof(float));
  float* v = checked_malloc((size_t)n * sizeof(float));
  memcpy(p, lockstep_trainer_parameters(trainer), (size_t)n * sizeof(float));
  memcpy(m, lockstep_trainer_m(trainer), (size_t)n * sizeof(float));
  memcpy(v, lockstep_trainer_v(trainer), (size_t)n * sizeof(float));
  const int32_t kept = ids[cols + 2];
  ids[cols + 2] = 256;
  CHECK(lockstep_trainer_step(trainer, ids, rows, cols, &step_loss, err) == LOCKSTEP_ERROR_INVALID_ARGUMENT);
  CHECK(contains(lockstep_error_message(err), "got 256 at row 1, position 2"));
  ids[cols + 2] = kept;
  CHECK(lockstep_trainer_completed_steps(trainer) == 1);
  CHECK(lockstep_trainer_gradient(trainer) == NULL);
  CHECK(same_floats(p, lockstep_trainer_parameters(trainer), n));
  CHECK(same_floats(m, lockstep_trainer_m(trainer), n));
  CHECK(same_floats(v, lockstep_trainer_v(trainer), n));

  /* Resume from the recorded state on the reference device: the next step has the same bits. */
  lockstep_trainer_state state;
  state.parameters = p;
  state.m = m;
  state.v = v;
  state.ema = NULL;
  state.count = n;
  state.completed_steps = 1;
  lockstep_trainer* resumed = NULL;
  options.device = LOCKSTEP_DEVICE_REFERENCE;
  CHECK_OK(lockstep_trainer_from_state(&c, &state, &options, &resumed, err), err);
  if (resumed) {
    uint32_t a = 0, b = 1;
    CHECK_OK(lockstep_trainer_step(trainer, ids, rows, cols, &a, err), err);
    CHECK_OK(lockstep_trainer_step(resumed, ids, rows, cols, &b, err), err);
    CHECK(a == b);
    CHECK(lockstep_trainer_completed_steps(resumed) == 2);
    CHECK(same_floats(lockstep_trainer_parameters(trainer), lockstep_trainer_parameters(resumed), n));
    CHECK(same_floats(lockstep_trainer_m(trainer), lockstep_trainer_m(resumed), n));
    CHECK(same_floats(lockstep_trainer_v(trainer), lockstep_trainer_v(resumed), n));
    CHECK(same_floats(lockstep_trainer_gradient(trainer), lockstep_trainer_gradient(resumed), n));
    lockstep_trainer_free(resumed);
  }
  state.completed_steps = -1;
  resumed = NULL;
  CHECK(lockstep_trainer_from_state(&c, &state, &options, &resumed, err) == LOCKSTEP_ERROR_INVALID_ARGUMENT);
  CHECK(resumed == NULL);
  state.completed_steps = 0;
  state.count = n - 1;
  CHECK(lockstep_trainer_from_state(&c, &state, &options, &resumed, err) == LOCKSTEP_ERROR_INVALID_ARGUMENT);

  /* A model of the trainer's parameters. */
  lockstep_model* trained = NULL;
  CHECK_OK(lockstep_trainer_to_model(trainer, NULL, &trained, err), err);
  CHECK_OK(lockstep_trainer_parameters_sha256(trainer, hex, err), err);
  if (trained) CHECK(strcmp(hex, lockstep_model_parameters_sha256(trained)) == 0);
  lockstep_model_free(trained);

  /* Options out of range. */
  options = lockstep_trainer_default_options();
  options.beta1 = 1.0f;
  lockstep_trainer* bad = NULL;
  CHECK(lockstep_trainer_create(&c, p, n, &options, &bad, err) == LOCKSTEP_ERROR_INVALID_ARGUMENT);
  CHECK(contains(lockstep_error_message(err), "beta1"));
  CHECK(bad == NULL);

  free(p);
  free(m);
  free(v);
  free(ids);
  lockstep_trainer_free(trainer);
  lockstep_model_free(model);
  lockstep_error_free(err);
}

/* Enum fields and arguments holding integers outside their lists (C lets any int live there):
 * refused with INVALID_ARGUMENT naming the value, or named "unknown status", never undefined
 * behaviour inside the library (the sanitizer stage of `./run test` runs this under UBSan). */
static void test_out_of_range_enums(const char* path) {
  static const int bad[] = {-1, 3, 4, 7, 16, 1000, INT_MIN, INT_MAX};
  const size_t n_bad = sizeof(bad) / sizeof(bad[0]);
  static const int bad_status[] = {-1, 9, 15, 16, 99, INT_MIN, INT_MAX};
  for (size_t i = 0; i < sizeof(bad_status) / sizeof(bad_status[0]); ++i)
    CHECK(strcmp(lockstep_status_name((lockstep_status)bad_status[i]), "unknown status") == 0);

  lockstep_error* err = lockstep_error_create();
  lockstep_model* model = NULL;
  CHECK_OK(lockstep_model_load(path, NULL, &model, err), err);
  if (!model) {
    lockstep_error_free(err);
    return;
  }
  const lockstep_config c = lockstep_model_config(model);
  const int64_t n = lockstep_model_parameter_count(model);
  int32_t ids[4];
  fill_ids(ids, 4, 5);
  float* logits = checked_malloc((size_t)(4 * c.vocab_size) * sizeof(float));
  char expected[64];
  for (size_t i = 0; i < n_bad; ++i) {
    snprintf(expected, sizeof(expected), "device %d is not a lockstep_device", bad[i]);
    lockstep_call_options call = lockstep_call_default_options();
    call.device = (lockstep_device)bad[i];
    CHECK(lockstep_model_logits(model, ids, 1, 4, NULL, logits, (int64_t)4 * c.vocab_size, &call, err) ==
          LOCKSTEP_ERROR_INVALID_ARGUMENT);
    CHECK(contains(lockstep_error_message(err), expected));

    lockstep_model_options options = lockstep_model_default_options();
    options.device = (lockstep_device)bad[i];
    lockstep_model* other = NULL;
    CHECK(lockstep_model_load(path, &options, &other, err) == LOCKSTEP_ERROR_INVALID_ARGUMENT);
    CHECK(contains(lockstep_error_message(err), expected));
    CHECK(other == NULL);

    lockstep_trainer_options trainer_options = lockstep_trainer_default_options();
    trainer_options.device = (lockstep_device)bad[i];
    lockstep_trainer* trainer = NULL;
    CHECK(lockstep_trainer_create(&c, lockstep_model_parameters(model), n, &trainer_options, &trainer, err) ==
          LOCKSTEP_ERROR_INVALID_ARGUMENT);
    CHECK(contains(lockstep_error_message(err), expected));
    CHECK(trainer == NULL);

    snprintf(expected, sizeof(expected), "precision %d is not a lockstep_precision", bad[i]);
    options = lockstep_model_default_options();
    options.precision = (lockstep_precision)bad[i];
    CHECK(lockstep_model_load(path, &options, &other, err) == LOCKSTEP_ERROR_INVALID_ARGUMENT);
    CHECK(contains(lockstep_error_message(err), expected));
    CHECK(other == NULL);
    CHECK(lockstep_model_from_parameters(&c, lockstep_model_parameters(model), n, &options, &other, err) ==
          LOCKSTEP_ERROR_INVALID_ARGUMENT);
    CHECK(contains(lockstep_error_message(err), expected));
    CHECK(other == NULL);

    trainer_options = lockstep_trainer_default_options();
    trainer_options.precision = (lockstep_precision)bad[i];
    CHECK(lockstep_trainer_create(&c, lockstep_model_parameters(model), n, &trainer_options, &trainer, err) ==
          LOCKSTEP_ERROR_INVALID_ARGUMENT);
    CHECK(contains(lockstep_error_message(err), expected));
    CHECK(trainer == NULL);
  }
  free(logits);
  lockstep_model_free(model);
  lockstep_error_free(err);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s MODEL\n", argv[0]);
    return 2;
  }
  test_errors();
  test_model(argv[1]);
  test_trainer(argv[1]);
  test_out_of_range_enums(argv[1]);
  if (failures) {
    fprintf(stderr, "test_c_api: %d check(s) failed\n", failures);
    return 1;
  }
  printf("test_c_api: all checks passed\n");
  return 0;
}
