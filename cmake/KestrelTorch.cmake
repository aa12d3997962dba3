# Finds LibTorch.
#   default:  the torch 2.11.0 wheel in kestrel's Python environment (scripts/setup.sh installs it);
#             KESTREL_PYTHON names that interpreter.
#   your own: -DTorch_DIR=<libtorch>/share/cmake/Torch (or CMAKE_PREFIX_PATH) takes precedence.
set(KESTREL_PYTHON "$ENV{HOME}/.cache/kestrel/venv/bin/python" CACHE FILEPATH "Python with torch installed")
if(NOT Torch_DIR AND NOT CMAKE_PREFIX_PATH)
  execute_process(COMMAND ${KESTREL_PYTHON} -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
                  OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "kestrel: cannot import torch with ${KESTREL_PYTHON}. Run scripts/setup.sh, "
                        "or pass -DTorch_DIR=<libtorch>/share/cmake/Torch.")
  endif()
  list(APPEND CMAKE_PREFIX_PATH ${_torch_prefix})
endif()

if(KESTREL_WITH_CUDA)
  # sm_90 = H100/H200. TorchConfig ignores CMAKE_CUDA_ARCHITECTURES for its own flags and reads
  # TORCH_CUDA_ARCH_LIST instead (its default list includes archs that CUDA 13's nvcc rejects).
  if(NOT CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  if(NOT TORCH_CUDA_ARCH_LIST)
    set(TORCH_CUDA_ARCH_LIST "9.0")
  endif()
  set(CMAKE_CUDA_STANDARD 17)
  enable_language(CUDA)
endif()

find_package(Torch REQUIRED)
# Executables find the wheel's libraries (and, through their RPATH, its nvidia/* libraries) at run time.
get_filename_component(KESTREL_TORCH_LIB_DIR "${TORCH_LIBRARY}" DIRECTORY)
set(CMAKE_BUILD_RPATH "${KESTREL_TORCH_LIB_DIR}")
set(CMAKE_INSTALL_RPATH "${KESTREL_TORCH_LIB_DIR}")

# libtorch.so and libtorch_cpu.so export their own copies of std::filesystem (statically linked from
# a newer libstdc++). With libtorch first in the library search order, kestrel's calls bind to those
# copies, and some of them crash (std::filesystem::remove_all jumps to address 0). Naming libstdc++
# before everything else on the link line puts the system's copy first in the search order.
add_library(kestrel_stdcxx_first INTERFACE)
target_link_options(kestrel_stdcxx_first INTERFACE "LINKER:--no-as-needed" "-lstdc++")
