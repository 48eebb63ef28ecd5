# Strict warnings for hmr's own targets only (vendor and test-framework headers are not ours).
function(hmr_strict_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wshadow -Wformat=2 -Wcast-align -Wimplicit-fallthrough
    $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor -Woverloaded-virtual>)
  if(HMR_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
