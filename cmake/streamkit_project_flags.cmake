# Flags for streamkit's own tests, benchmarks and examples; never applied to the INTERFACE target.
add_library(streamkit_project_flags INTERFACE)
target_compile_options(streamkit_project_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra -Werror=all-warnings -lineinfo>)

# Host code only: device code is checked with compute-sanitizer (tests/gpu_check.sh). With a GPU,
# run the tests with ASAN_OPTIONS=protect_shadow_gap=0 (the CUDA driver maps that range).
option(STREAMKIT_SANITIZE "Build streamkit's own host code with AddressSanitizer and UBSan (errors abort)" OFF)
if(STREAMKIT_SANITIZE)
  target_compile_options(streamkit_project_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-fsanitize=address,-fsanitize=undefined,-fno-sanitize-recover=all,-fno-omit-frame-pointer>)
  target_link_options(streamkit_project_flags INTERFACE -fsanitize=address,undefined)
endif()
