# The layout checks' own tests share this: runs CHECK (a script taking -DROOT) on TREE and
# sets OK in the caller to whether it did what EXPECT says, "pass" (exit 0) or a regex that
# its refusal must match; prints what it did otherwise, under NAME.
function(run_check check tree name expect ok)
  execute_process(COMMAND "${CMAKE_COMMAND}" -DROOT=${tree} -P "${check}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  set(done FALSE)
  if(expect STREQUAL "pass" AND rc EQUAL 0)
    set(done TRUE)
  elseif(NOT expect STREQUAL "pass" AND NOT rc EQUAL 0 AND out MATCHES "${expect}")
    set(done TRUE)
  endif()
  if(NOT done)
    message("${name}: expected ${expect}, got exit ${rc}:\n${out}")
  endif()
  set(${ok} ${done} PARENT_SCOPE)
endfunction()
