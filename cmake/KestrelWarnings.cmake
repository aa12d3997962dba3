# Warnings for kestrel's own C++ (not for nvcc, not for third-party headers).
function(kestrel_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
endfunction()
