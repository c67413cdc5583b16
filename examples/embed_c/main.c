/* Embedding a model with the C API (lockstep.h): load a model, feed it a prompt, print the greedy
 * continuation. examples/embed_cpp does the same with the C++ API and prints the same bytes.
 *
 *   embed_c MODEL [PROMPT] [N]
 *
 * MODEL is a model directory, a checkpoint step directory, a checkpoint location or a model.json
 * path; PROMPT defaults to "Hello", N (the bytes to generate) to 32. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lockstep/lockstep.h"

/* Printable ASCII as itself, every other byte (and '"', '\\') as \xHH. */
static void print_escaped(const int32_t* bytes, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const int32_t b = bytes[i];
    if (b >= 0x20 && b < 0x7f && b != '"' && b != '\\') {
      putchar((int)b);
    } else {
      printf("\\x%02x", (unsigned)b & 0xffu);
    }
  }
}

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    fprintf(stderr, "usage: %s MODEL [PROMPT] [N]\n", argv[0]);
    return 2;
  }
  const char* prompt = argc > 2 ? argv[2] : "Hello";
  const long n = argc > 3 ? strtol(argv[3], NULL, 10) : 32;
  const size_t prompt_len = strlen(prompt);
  if (prompt_len == 0 || n < 1 || n > 1000000) {
    fprintf(stderr, "embed_c: PROMPT must not be empty and N must be in [1, 1000000]\n");
    return 2;
  }

  /* The error object is ours: every failing call writes its status and message here. */
  lockstep_error* error = lockstep_error_create();
  lockstep_model* model = NULL;
  int32_t* text = malloc((prompt_len + (size_t)n) * sizeof(int32_t));
  int rc = 1;
  if (!error || !text) {
    fprintf(stderr, "embed_c: out of memory\n");
    goto done;
  }
  if (lockstep_model_load(argv[1], NULL, &model, error) != LOCKSTEP_OK) {
    fprintf(stderr, "embed_c: %s: %s\n", lockstep_status_name(lockstep_error_status(error)),
            lockstep_error_message(error));
    goto done;
  }

  const int64_t window = lockstep_model_config(model).length;
  size_t len = 0; /* the prompt's bytes, then each byte chosen */
  for (size_t i = 0; i < prompt_len; ++i) text[len++] = (unsigned char)prompt[i];
  for (long i = 0; i < n; ++i) {
    /* One row [1, t]: the newest `window` bytes of the text. */
    const int64_t t = (int64_t)len < window ? (int64_t)len : window;
    int32_t next = 0;
    if (lockstep_model_next_bytes(model, text + len - (size_t)t, 1, t, NULL, &next, 1, NULL,
                                  error) != LOCKSTEP_OK) {
      fprintf(stderr, "embed_c: %s: %s\n", lockstep_status_name(lockstep_error_status(error)),
              lockstep_error_message(error));
      goto done;
    }
    text[len++] = next;
  }

  printf("parameters sha256 %s\n", lockstep_model_parameters_sha256(model));
  printf("prompt \"");
  print_escaped(text, prompt_len);
  printf("\"\nbytes");
  for (size_t i = prompt_len; i < len; ++i) printf(" %d", (int)text[i]);
  printf("\ntext \"");
  print_escaped(text + prompt_len, len - prompt_len);
  printf("\"\n");
  rc = 0;

done:
  lockstep_model_free(model);
  lockstep_error_free(error);
  free(text);
  return rc;
}
