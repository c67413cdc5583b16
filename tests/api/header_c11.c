/* lockstep.h compiles as strict C11 on its own (a ctest runs the C compiler with -std=c11
 * -pedantic -Werror on this file) and its names have the types the documentation gives. */
#include "lockstep/lockstep.h"

_Static_assert(LOCKSTEP_OK == 0, "success is zero");
_Static_assert(LOCKSTEP_SHA256_HEX_SIZE == 65, "64 hex digits and a NUL");
_Static_assert(sizeof(((lockstep_config*)0)->vocab_size) == 4, "int32 dimensions");

int lockstep_header_compiles_as_c(void);
int lockstep_header_compiles_as_c(void) {
  lockstep_config config = lockstep_config_default();
  lockstep_model_options model_options = lockstep_model_default_options();
  lockstep_call_options call = lockstep_call_default_options();
  lockstep_trainer_options trainer_options = lockstep_trainer_default_options();
  lockstep_status (*load)(const char*, const lockstep_model_options*, lockstep_model**,
                          lockstep_error*) = lockstep_model_load;
  (void)model_options;
  (void)call;
  (void)trainer_options;
  return config.vocab_size + (load != 0);
}
