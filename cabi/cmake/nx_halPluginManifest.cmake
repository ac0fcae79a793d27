# nx_hal_add_plugin_manifest(TARGET <target> NAME <name> DESTINATION <dir>
#                            [PYTHON_PACKAGE <package> | LIBRARY_DESTINATION <dir>]
#                            [ABI_VERSION <major.minor>])
#
# Writes <name>.json, the manifest through which nx_hal's C loader finds the
# plugin with no variable set (as the Vulkan loader finds its drivers), and
# installs it into DESTINATION, which ends in share/nx_hal/plugins:
#  - PYTHON_PACKAGE: the library is installed into that Python package, in the
#    environment whose share/ holds the manifest. A wheel built by
#    scikit-build-core installs it with DESTINATION
#    ${SKBUILD_DATA_DIR}/share/nx_hal/plugins. The loader resolves the
#    package under <prefix>/lib/python3.*/site-packages, because a py3 wheel
#    cannot know the Python version it will be installed for.
#  - LIBRARY_DESTINATION: the directory install(TARGETS) put the library in;
#    the manifest records its path relative to the manifest.
# ABI_VERSION defaults to the ABI of the headers the plugin is built against.
function(nx_hal_add_plugin_manifest)
  cmake_parse_arguments(ARG "" "TARGET;NAME;DESTINATION;PYTHON_PACKAGE;LIBRARY_DESTINATION;ABI_VERSION" "" ${ARGN})
  foreach(required TARGET NAME DESTINATION)
    if(NOT ARG_${required})
      message(FATAL_ERROR "nx_hal_add_plugin_manifest: ${required} is required")
    endif()
  endforeach()
  if(NOT ARG_NAME MATCHES "^[a-z0-9_-]+$")
    message(FATAL_ERROR "nx_hal_add_plugin_manifest: NAME '${ARG_NAME}' must be [a-z0-9_-]+")
  endif()
  if(NOT ARG_ABI_VERSION)
    set(ARG_ABI_VERSION "${nx_hal_ABI_VERSION}")
  endif()
  if(ARG_PYTHON_PACKAGE)
    set(location "\"python_package\": \"${ARG_PYTHON_PACKAGE}\",\n  \"library\": \"$<TARGET_FILE_NAME:${ARG_TARGET}>\"")
  elseif(ARG_LIBRARY_DESTINATION)
    # Relative install directories share one prefix whatever `cmake --install
    # --prefix` later says, so a stand-in prefix gives the right relative path.
    set(dirs)
    foreach(dir "${ARG_DESTINATION}" "${ARG_LIBRARY_DESTINATION}")
      if(NOT IS_ABSOLUTE "${dir}")
        set(dir "/nx_hal_prefix/${dir}")
      endif()
      list(APPEND dirs "${dir}")
    endforeach()
    list(GET dirs 0 manifest_dir)
    list(GET dirs 1 library_dir)
    file(RELATIVE_PATH relative "${manifest_dir}" "${library_dir}")
    if(relative STREQUAL "")
      set(relative ".")
    endif()
    set(location "\"library_path\": \"${relative}/$<TARGET_FILE_NAME:${ARG_TARGET}>\"")
  else()
    message(FATAL_ERROR "nx_hal_add_plugin_manifest: give PYTHON_PACKAGE or LIBRARY_DESTINATION")
  endif()
  set(manifest "${CMAKE_CURRENT_BINARY_DIR}/nx_hal_manifests/${ARG_NAME}.json")
  file(GENERATE OUTPUT "${manifest}" CONTENT
"{
  \"file_format_version\": \"1.0\",
  \"name\": \"${ARG_NAME}\",
  \"abi_version\": \"${ARG_ABI_VERSION}\",
  ${location}
}
")
  install(FILES "${manifest}" DESTINATION "${ARG_DESTINATION}")
endfunction()
