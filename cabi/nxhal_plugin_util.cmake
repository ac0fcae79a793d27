# Defines the static helper library every nx_hal plugin links (PIC, hidden
# visibility, so each plugin owns a private copy). Set NXHAL_ROOT to the
# repository root before including this file.
if(TARGET nxhal_plugin_util)
  return()
endif()
if(NOT NXHAL_ROOT)
  get_filename_component(NXHAL_ROOT "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
endif()
find_package(Threads REQUIRED)
add_library(nxhal_plugin_util STATIC
  ${NXHAL_ROOT}/cabi/status.c
  ${NXHAL_ROOT}/cabi/struct_check.c
  ${NXHAL_ROOT}/cabi/options.c
  ${NXHAL_ROOT}/cabi/dtype.c
  ${NXHAL_ROOT}/cabi/tensor_desc.c
  ${NXHAL_ROOT}/cabi/event.c
  ${NXHAL_ROOT}/cabi/negotiate.c
  ${NXHAL_ROOT}/cabi/memory.c
  ${NXHAL_ROOT}/cabi/digest.c
  ${NXHAL_ROOT}/cabi/dlpack.c)
set_target_properties(nxhal_plugin_util PROPERTIES
  POSITION_INDEPENDENT_CODE ON
  C_VISIBILITY_PRESET hidden
  C_STANDARD 99
  C_STANDARD_REQUIRED ON)
target_include_directories(nxhal_plugin_util PUBLIC ${NXHAL_ROOT}/include)
target_link_libraries(nxhal_plugin_util PUBLIC Threads::Threads)
