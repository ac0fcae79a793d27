# The nx_hal SDK as a plugin inside this repository sees it: the same targets
# and function as the installed package config (cmake/nx_halConfig.cmake.in),
# built from the checkout's sources. A plugin built from its sdist, or a
# vendor's plugin, uses find_package(nx_hal CONFIG) against the installed core.
if(TARGET nx_hal::headers)
  return()
endif()
get_filename_component(NXHAL_ROOT "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
include("${CMAKE_CURRENT_LIST_DIR}/nxhal_plugin_util.cmake")

file(STRINGS "${NXHAL_ROOT}/include/nx_hal/nx_hal.h" _nx_hal_abi REGEX "#define NXHAL_ABI_VERSION_(MAJOR|MINOR) [0-9]+")
string(REGEX REPLACE ".*MAJOR ([0-9]+).*" "\\1" _nx_hal_major "${_nx_hal_abi}")
string(REGEX REPLACE ".*MINOR ([0-9]+).*" "\\1" _nx_hal_minor "${_nx_hal_abi}")
set(nx_hal_ABI_VERSION "${_nx_hal_major}.${_nx_hal_minor}")
set(nx_hal_INCLUDE_DIR "${NXHAL_ROOT}/include")

add_library(nx_hal_headers_in_tree INTERFACE)
target_include_directories(nx_hal_headers_in_tree INTERFACE "${nx_hal_INCLUDE_DIR}")
add_library(nx_hal::headers ALIAS nx_hal_headers_in_tree)
add_library(nx_hal::plugin_helpers ALIAS nxhal_plugin_util)
include("${CMAKE_CURRENT_LIST_DIR}/cmake/nx_halPluginManifest.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/cmake/nx_halWarnings.cmake")
