# Builds and runs tests/package/consumer against streamkit in one of three ways (MODE):
# find_package on an installed tree, add_subdirectory, or FetchContent from a local path.
file(REMOVE_RECURSE ${WORK_DIR})
set(consumer_args -DSTREAMKIT_MODE=${MODE} -DSTREAMKIT_SOURCE_DIR=${SOURCE_DIR}
                  -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES})

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "failed (${result}): ${ARGN}\n${output}")
  endif()
  message("${output}")
endfunction()

if(MODE STREQUAL "find_package")
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/streamkit-build -G ${GENERATOR}
      -DSTREAMKIT_BUILD_TESTS=OFF -DSTREAMKIT_BUILD_BENCHMARKS=OFF -DSTREAMKIT_BUILD_EXAMPLES=OFF
      -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix)
  run(${CMAKE_COMMAND} --install ${WORK_DIR}/streamkit-build)
  list(APPEND consumer_args -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
endif()
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/package/consumer -B ${WORK_DIR}/consumer-build -G ${GENERATOR} ${consumer_args})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer-build)
run(${WORK_DIR}/consumer-build/consumer)
if(REQUIRE_MPI AND NOT EXISTS ${WORK_DIR}/consumer-build/consumer_mpi)
  message(FATAL_ERROR "streamkit::mpi was built here, but the consumer did not get it (${MODE})")
endif()
