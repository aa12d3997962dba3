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
  # TorchConfig sets the CUDA flags from TORCH_CUDA_ARCH_LIST (and turns CMAKE_CUDA_ARCHITECTURES off);
  # its default list includes archs that CUDA 13's nvcc rejects. kestrel's own kernels (CUDA NMS, the fused
  # BN+SiLU) for every GPU the torch 2.11 cu130 wheel runs on (torch.cuda.get_arch_list(): Turing T4 to
  # Blackwell), plus PTX of the newest for later GPUs: PTX runs only on its own architecture or newer, so
  # "9.0+PTX" alone left a T4, A100 or L4 without an NMS kernel ("no kernel image is available").
  # -DTORCH_CUDA_ARCH_LIST=9.0 builds faster for one GPU.
  # (CMake itself wants CMAKE_CUDA_ARCHITECTURES set when CUDA is enabled.)
  if(NOT CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  if(NOT TORCH_CUDA_ARCH_LIST)
    set(TORCH_CUDA_ARCH_LIST "7.5;8.0;8.6;8.9;9.0;10.0;12.0+PTX")
  endif()
  set(CMAKE_CUDA_STANDARD 17)
  enable_language(CUDA)
endif()

find_package(Torch REQUIRED)

# kestrel's process group code compiles against the toolkit's nccl.h, while the NCCL library at run time is
# the one torch was built for (the wheel pins it). ProcessGroupNCCL's options embed NCCL's config struct,
# so the two versions must agree: say so at configure time when they do not.
if(KESTREL_WITH_CUDA)
  find_file(KESTREL_NCCL_HEADER nccl.h HINTS ${CMAKE_CUDA_TOOLKIT_INCLUDE_DIRECTORIES} /usr/local/cuda/include)
  execute_process(COMMAND ${KESTREL_PYTHON} -c
                  "import importlib.metadata as m, re; print(next((re.sub(r'.*==\\s*', '', r.split(';')[0]).strip() for r in (m.requires('torch') or []) if r.startswith('nvidia-nccl')), ''))"
                  OUTPUT_VARIABLE _torch_nccl OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc ERROR_QUIET)
  if(KESTREL_NCCL_HEADER AND _rc EQUAL 0 AND _torch_nccl)
    file(STRINGS "${KESTREL_NCCL_HEADER}" _nccl_defs REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
    string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*NCCL_MINOR ([0-9]+).*NCCL_PATCH ([0-9]+).*" "\\1.\\2.\\3" _header_nccl "${_nccl_defs}")
    if(NOT _header_nccl STREQUAL _torch_nccl)
      message(WARNING "kestrel: ${KESTREL_NCCL_HEADER} is NCCL ${_header_nccl}, but torch runs with NCCL ${_torch_nccl}: "
                      "multi-GPU training (ProcessGroupNCCL) may misbehave. Use the NCCL headers of version ${_torch_nccl}.")
    else()
      message(STATUS "kestrel: NCCL ${_header_nccl} headers, as torch's")
    endif()
  endif()
endif()
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
