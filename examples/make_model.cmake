# cmake -DLOCKSTEP=<lockstep binary> -DDIR=<dir> -P make_model.cmake
# A fresh small model directory at DIR for the embedding tests (init refuses a DIR that exists).
file(REMOVE_RECURSE "${DIR}")
execute_process(
  COMMAND "${LOCKSTEP}" init --seed 3 --length 32 --d-model 32 --n-layers 2 --n-heads 2
          --n-kv-heads 1 --d-ff 64 --batch 2 -o "${DIR}"
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "lockstep init failed (${rc})")
endif()
