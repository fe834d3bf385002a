# Installs the built attnkit into a scratch prefix, then configures, builds and runs the consumer
# project against it with find_package(attnkit); then compiles the C example (C_EXAMPLE) as strict C11
# with the flags `pkg-config attnkit` gives for the installed tree, and runs it against the installed
# libattnkit_c. Arguments: BUILD_DIR, SOURCE_DIR, WORK_DIR, CXX, CC, C_EXAMPLE.
file(REMOVE_RECURSE "${WORK_DIR}")
function(run_step)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "step failed (${result}): ${ARGV}\n${output}")
  endif()
  message(STATUS "${output}")
endfunction()
run_step(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
run_step(${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/build" -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
         -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_C_COMPILER=${CC} -DCMAKE_BUILD_TYPE=Release)
run_step(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
run_step("${WORK_DIR}/build/consumer")
run_step("${WORK_DIR}/build/consumer_c")  # found through the installed tree's RUNPATH CMake sets

# C, through pkg-config: the .pc file locates the prefix from its own place, so the moved tree works.
file(GLOB_RECURSE pc_files "${WORK_DIR}/prefix/*/attnkit.pc")
list(LENGTH pc_files pc_count)
if(NOT pc_count EQUAL 1)
  message(FATAL_ERROR "expected one installed attnkit.pc under ${WORK_DIR}/prefix, found: ${pc_files}")
endif()
get_filename_component(pc_dir "${pc_files}" DIRECTORY)
execute_process(COMMAND ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${pc_dir} pkg-config --cflags --libs attnkit
                RESULT_VARIABLE result OUTPUT_VARIABLE pc_flags ERROR_VARIABLE pc_error OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "pkg-config attnkit failed: ${pc_error}")
endif()
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
run_step(${CC} -std=c11 -Wall -Wextra -pedantic -Werror "${C_EXAMPLE}" ${pc_flags} -lm -o "${WORK_DIR}/forward_c")
get_filename_component(lib_dir "${pc_dir}" DIRECTORY)
run_step(${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${lib_dir} "${WORK_DIR}/forward_c")
