# Runs `ar -M` with an MRI script (cmake -DAR=... -DMRI=... -DOUT=... -P bundle.cmake): the
# static client library as one archive of all its members (client/library/CMakeLists.txt).
file(REMOVE ${OUT})
execute_process(COMMAND ${AR} -M INPUT_FILE ${MRI} RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ar -M ${MRI} failed (${rc}): ${err}")
endif()
