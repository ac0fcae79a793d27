# nx_hal_target_warnings(<target>): the warnings every nx_hal C target builds
# with. -Werror only when NXHAL_WERROR is on (CI turns it on): a user building
# a plugin from its sdist with a newer compiler gets warnings, not a failed
# install.
option(NXHAL_WERROR "Treat C compiler warnings as errors" OFF)
function(nx_hal_target_warnings target)
  if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -Wall -Wextra)
    if(NXHAL_WERROR)
      target_compile_options(${target} PRIVATE -Werror)
    endif()
  endif()
endfunction()
