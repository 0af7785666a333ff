# eccl._torch: the torch.distributed backend (python/src/torch_pg.cpp), a
# c10d ProcessGroup on libeccl, registered by `import eccl.torch`. Included
# from python/CMakeLists.txt once the Python package itself is configured.
#
# Optional: built only where libtorch's CMake config is found (Debian's
# libtorch-dev ships it; elsewhere the interpreter's
# torch.utils.cmake_prefix_path is tried), skipped with a STATUS line
# otherwise; ctest then lists python_eccl_torch as skipped (exit 77).

option(ECCL_TORCH "Build eccl._torch, the torch.distributed backend (needs libtorch-dev)" ON)

macro(eccl_torch_skip why)
  message(STATUS "eccl: ${why}: skipping the torch.distributed backend (eccl._torch)")
  if(ECCL_BUILD_TESTS)
    add_test(NAME python_eccl_torch COMMAND sh -c "echo 'python_eccl_torch: not built: ${why}'; exit 77")
    set_tests_properties(python_eccl_torch PROPERTIES LABELS python SKIP_RETURN_CODE 77)
  endif()
  return()
endmacro()

function(eccl_torch_configure)
  if(NOT ECCL_TORCH)
    eccl_torch_skip("ECCL_TORCH=OFF")
  endif()
  find_package(Torch CONFIG QUIET)
  if(NOT Torch_FOUND)
    execute_process(COMMAND ${Python3_EXECUTABLE} -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
                    OUTPUT_VARIABLE torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(torch_prefix)
      find_package(Torch CONFIG QUIET PATHS ${torch_prefix} NO_DEFAULT_PATH)
    endif()
  endif()
  if(NOT Torch_FOUND)
    eccl_torch_skip("no libtorch CMake config (libtorch-dev)")
  endif()
  # The Python side of c10d (ProcessGroup's pybind11 class, the Store and
  # tensor casters) lives in libtorch_python, which TorchConfig leaves out.
  get_filename_component(torch_libdir "${TORCH_LIBRARY}" DIRECTORY)
  find_library(ECCL_TORCH_PYTHON_LIB torch_python HINTS ${torch_libdir} ${TORCH_INSTALL_PREFIX}/lib)
  if(NOT ECCL_TORCH_PYTHON_LIB)
    eccl_torch_skip("no libtorch_python next to libtorch")
  endif()
  if(NOT EXISTS "${TORCH_INSTALL_PREFIX}/include/torch/csrc/distributed/c10d/ProcessGroup.hpp")
    eccl_torch_skip("libtorch without torch.distributed (c10d) headers")
  endif()
  message(STATUS "eccl: torch.distributed backend for torch ${Torch_VERSION} (${TORCH_INSTALL_PREFIX})")

  pybind11_add_module(eccl_torch_ext MODULE src/torch_pg.cpp)
  set_target_properties(eccl_torch_ext PROPERTIES
    OUTPUT_NAME _torch
    LIBRARY_OUTPUT_DIRECTORY ${ECCL_PY_OUT}
    CXX_STANDARD 17
    CXX_STANDARD_REQUIRED ON
    CXX_EXTENSIONS OFF
    CXX_VISIBILITY_PRESET hidden
    INSTALL_RPATH "$ORIGIN/${ECCL_PY_TO_LIB}")
  # libtorch's headers as SYSTEM includes: their warnings are not ours.
  target_include_directories(eccl_torch_ext SYSTEM PRIVATE ${TORCH_INCLUDE_DIRS})
  target_compile_options(eccl_torch_ext PRIVATE ${TORCH_CXX_FLAGS}
    -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter)
  target_link_libraries(eccl_torch_ext PRIVATE eccl ${TORCH_LIBRARIES} ${ECCL_TORCH_PYTHON_LIB})
  add_dependencies(eccl_torch_ext eccl_python_files)
  install(TARGETS eccl_torch_ext LIBRARY DESTINATION ${ECCL_PYTHON_INSTALL_DIR}/eccl)

  if(ECCL_BUILD_TESTS)
    add_test(NAME python_eccl_torch
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/tests/run_pytest.py python_eccl_torch
              ${PROJECT_BINARY_DIR}/python ${CMAKE_CURRENT_SOURCE_DIR}/tests_torch _torch pytest torch)
    set_tests_properties(python_eccl_torch PROPERTIES LABELS python TIMEOUT 180 SKIP_RETURN_CODE 77)
  endif()
endfunction()
eccl_torch_configure()
