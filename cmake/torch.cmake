# LibTorch-linked targets: the trainer library and the trainbox-torch program.
# Included from the top-level CMakeLists after find_package(Torch).

# torch's package dir (…/site-packages/torch or a LibTorch root): the doctor describes it
# by default, reading its files without loading it.
get_filename_component(TRAINBOX_TORCH_ROOT "${Torch_DIR}/../../.." ABSOLUTE)
# On probe.cpp alone, the one file that reads it: the path names this checkout, and on the whole
# target it made every trainbox_core object differ between clones and from the torch-free (pip)
# build's, so ccache could share none of them (tests/integration/pip_package.sh).
set_property(SOURCE src/env/probe.cpp APPEND PROPERTY COMPILE_DEFINITIONS TRAINBOX_DEFAULT_TORCH_DIR="${TRAINBOX_TORCH_ROOT}")

# torch's headers are third-party: SYSTEM, so our -Werror never trips on them.
add_library(trainbox_torch_deps INTERFACE)
# libtorch.so exports its own (older, statically linked) copy of std::filesystem; when it
# comes first in the dynamic linker's search order it interposes libstdc++'s, and e.g.
# std::filesystem::remove_all crashes. Linking libstdc++ first makes the system's copy —
# the one our headers match — win for us and for libtorch alike.
# (Build tree: the paths TorchConfig found; installed: the `torch` target of the user's own
# find_package(Torch), which carries the same.)
target_link_libraries(trainbox_torch_deps INTERFACE "-Wl,--push-state,--no-as-needed" stdc++ "-Wl,--pop-state"
                      "$<BUILD_INTERFACE:${TORCH_LIBRARIES}>" "$<INSTALL_INTERFACE:torch>")
target_include_directories(trainbox_torch_deps SYSTEM INTERFACE "$<BUILD_INTERFACE:${TORCH_INCLUDE_DIRS}>")
target_compile_options(trainbox_torch_deps INTERFACE ${TORCH_CXX_FLAGS})
# torch/include ships fmt 12 headers, which shadow the system's fmt 9 in these files;
# use them header-only so nothing links against a mismatched libfmt.
target_compile_definitions(trainbox_torch_deps INTERFACE FMT_HEADER_ONLY)

add_library(trainbox_lib STATIC
  src/env/torch/smoke.cpp
  src/models/models.cpp
  src/models/gpt.cpp
  src/models/llama/model.cpp
  src/models/llama/hf_config.cpp
  src/models/lora.cpp
  src/models/hf_export.cpp
  src/models/bert/model.cpp
  src/models/bert/hf_config.cpp
  src/models/activation_checkpoint.cpp
  src/models/attention.cpp
  src/models/causal_attention_kernel.cpp
  src/models/weights.cpp
  src/io/torch/pt.cpp
  src/models/onnx.cpp
  src/data/dataset.cpp
  src/data/text.cpp
  src/data/text_classes.cpp
  src/data/loader.cpp
  src/data/sampler.cpp
  src/data/image_source.cpp
  src/distributed/process_group.cpp
  src/distributed/ddp.cpp
  src/distributed/zero.cpp
  src/distributed/grad_compressor.cpp
  src/distributed/zero3.cpp
  src/distributed/preflight.cpp
  src/distributed/device.cpp
  src/bench/driver.cpp
  src/bench/gemm.cpp
  src/bench/attention.cpp
  src/bench/memcpy.cpp
  src/bench/allreduce.cpp
  src/bench/compression.cpp
  src/bench/train.cpp
  src/bench/dataloader.cpp
  src/bench/heartbeat.cpp
  src/bench/command.cpp
  src/train/amp.cpp
  src/train/compression_state.cpp
  src/train/optim.cpp
  src/train/step.cpp
  src/train/evaluate.cpp
  src/train/run_log.cpp
  src/train/memory_stats.cpp
  src/train/comm_figures.cpp
  src/train/preflight_model.cpp
  src/train/plan.cpp
  src/train/checkpoint_state.cpp
  src/train/zero_state.cpp
  src/train/sharded_checkpoint.cpp
  src/train/types.cpp
  src/train/process_setup.cpp
  src/train/fault_injection.cpp
  src/train/trainer.cpp
  src/train/run.cpp
  src/train/sample.cpp
)
set_target_properties(trainbox_lib PROPERTIES OUTPUT_NAME trainbox)
target_link_libraries(trainbox_lib PUBLIC trainbox_core trainbox_image trainbox_text trainbox_torch_deps PRIVATE trainbox_warnings)
# The attention loops include no torch header (see src/models/causal_attention_kernel.h):
# no PCH, and AVX2 + FMA on x86-64 (the caller checks the CPU at run time).
set_source_files_properties(src/models/causal_attention_kernel.cpp PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set_source_files_properties(src/models/causal_attention_kernel.cpp PROPERTIES
    COMPILE_OPTIONS "-O3;-mavx2;-mfma;-ffp-contract=fast")
else()
  set_source_files_properties(src/models/causal_attention_kernel.cpp PROPERTIES COMPILE_OPTIONS "-O3;-ffp-contract=fast")
endif()
# One precompiled header for every torch-using file: torch/torch.h alone is ~20 s per file on 2 cores.
target_precompile_headers(trainbox_lib PRIVATE <torch/torch.h>)

add_executable(trainbox_torch tools/trainbox/torch_main.cpp tools/trainbox/dispatch.cpp tools/trainbox/cmd_train.cpp
               tools/trainbox/train_args.cpp
               tools/trainbox/cmd_sample.cpp tools/trainbox/cmd_bench.cpp tools/trainbox/cmd_smoke.cpp
               tools/trainbox/cmd_preflight.cpp)
set_target_properties(trainbox_torch PROPERTIES OUTPUT_NAME trainbox-torch)
target_link_libraries(trainbox_torch PRIVATE trainbox_lib trainbox_warnings)
# tools/ files include no torch headers (the CLI stays thin), so they need no PCH.
# Find the wheel's libraries (and its nvidia/* CUDA libraries, via libtorch's own RUNPATH) at run time.
# trainbox-torch itself links cudart (TorchConfig's CUDA::cudart): take the wheel's copy
# (nvidia/cu13/lib), the one libtorch_cuda loads, not whatever the loader finds first.
set(TRAINBOX_TORCH_RPATH "${TRAINBOX_TORCH_ROOT}/lib")
foreach(d cu13/lib cuda_runtime/lib)
  if(EXISTS "${TRAINBOX_TORCH_ROOT}/../nvidia/${d}")
    get_filename_component(d "${TRAINBOX_TORCH_ROOT}/../nvidia/${d}" ABSOLUTE)
    list(APPEND TRAINBOX_TORCH_RPATH "${d}")
  endif()
endforeach()
set_target_properties(trainbox_torch PROPERTIES BUILD_RPATH "${TRAINBOX_TORCH_RPATH}" INSTALL_RPATH "${TRAINBOX_TORCH_RPATH}")

# Two capabilities, each named for what it is:
#   TRAINBOX_WITH_CUDA — torch was built with CUDA (its torch_cuda target exists): device
#     timing, CUDA graphs, allocator statistics, set_device. The CUDA-only code lives in its
#     own files (src/bench/cuda_timer.cpp, src/train/cuda_graph_step.cpp), compiled only here.
#   TRAINBOX_WITH_NCCL — additionally the NCCL process group, whose header needs nccl.h.
# trainbox_backend_headers(NAME HEADER WITHOUT_NOTE HINTS…): a c10d backend whose header needs
# a third-party header (NCCL: nccl.h; Gloo: gloo/config.h). Found: trainbox_lib is built with
# TRAINBOX_WITH_<NAME> and USE_C10D_<NAME> (what torch's own headers test). Missing: a warning,
# and the build goes on without that backend.
function(trainbox_backend_headers name header without_note)
  find_path(TRAINBOX_${name}_INCLUDE ${header} HINTS ${ARGN})
  if(TRAINBOX_${name}_INCLUDE)
    target_compile_definitions(trainbox_lib PRIVATE TRAINBOX_WITH_${name} USE_C10D_${name})
    target_include_directories(trainbox_lib SYSTEM PRIVATE ${TRAINBOX_${name}_INCLUDE})
    message(STATUS "trainbox: ${name} path enabled (${header} in ${TRAINBOX_${name}_INCLUDE})")
  else()
    message(WARNING "trainbox: ${header} not found: building without the ${name} path (${without_note})")
  endif()
endfunction()
if(TARGET torch_cuda)
  target_compile_definitions(trainbox_lib PRIVATE TRAINBOX_WITH_CUDA)
  target_sources(trainbox_lib PRIVATE src/bench/cuda_timer.cpp src/train/cuda_graph_step.cpp src/train/cuda_debug.cpp)
  message(STATUS "trainbox: CUDA path enabled (torch ${Torch_VERSION} has torch_cuda)")
  # Prefer the wheel's own nccl.h (nvidia-nccl package): it matches the NCCL torch loads.
  trainbox_backend_headers(NCCL nccl.h "CUDA without data parallelism on GPUs"
    ${TRAINBOX_TORCH_ROOT}/../nvidia/nccl/include ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
else()
  message(STATUS "trainbox: CPU-only torch: building without the CUDA and NCCL paths")
endif()

# ProcessGroupGloo (in libtorch_cpu) is the CPU backend. The wheel ships no gloo headers;
# ProcessGroupGloo.hpp needs them only for declarations (every gloo member is held by
# pointer, the code is torch's own), so Debian's libgloo-dev headers serve. We never
# link libgloo: the symbols come from libtorch_cpu.
trainbox_backend_headers(GLOO gloo/config.h "install libgloo-dev; no data parallelism on the CPU")

# --- the installable library: find_package(trainbox) gives trainbox::trainbox ---
add_library(trainbox::trainbox ALIAS trainbox_lib)
include(GNUInstallDirs)
install(TARGETS trainbox trainbox_torch RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})  # side by side: trainbox execs trainbox-torch
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/trainbox DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/configs DESTINATION ${CMAKE_INSTALL_DATADIR}/trainbox)
# The Python module and the start-up hook trainbox run gives Python workers (docs/python.md).
install(DIRECTORY ${CMAKE_SOURCE_DIR}/python/trainbox DESTINATION ${CMAKE_INSTALL_DATADIR}/trainbox/python
  PATTERN __pycache__ EXCLUDE)
# The export needs every dependency as an installed/imported target; a build that uses the
# header-only fallbacks (the GPU test machine) installs the programs only.
if(fmt_FOUND AND nlohmann_json_FOUND AND ZLIB_FOUND)
  set_target_properties(trainbox_lib PROPERTIES EXPORT_NAME trainbox)
  install(TARGETS trainbox_lib trainbox_core trainbox_image trainbox_text trainbox_torch_deps trainbox_warnings
          EXPORT trainboxTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT trainboxTargets NAMESPACE trainbox:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/trainbox)
  include(CMakePackageConfigHelpers)
  configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/trainboxConfig.cmake.in
    ${CMAKE_BINARY_DIR}/trainboxConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/trainbox)
  write_basic_package_version_file(${CMAKE_BINARY_DIR}/trainboxConfigVersion.cmake COMPATIBILITY SameMinorVersion)
  install(FILES ${CMAKE_BINARY_DIR}/trainboxConfig.cmake ${CMAKE_BINARY_DIR}/trainboxConfigVersion.cmake
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/trainbox)
endif()

if(TRAINBOX_BUILD_EXAMPLES)
  add_subdirectory(examples)
endif()
