# Fails when two files of the tree define a class of one name in one namespace. C++ allows one
# definition of each (the one-definition rule), but neither compiler nor linker sees two
# different structs of one name that no single file includes together: the program is
# undefined, and a reader who finds one of them is misled about the other.
#
#   cmake -DROOT=<source tree> -P check_names.cmake
#
# Reads every .h, .cuh, .cc and .cu under the tree's source folders (tests/ and bench/
# included; build/ and hidden folders not), as clang-format leaves them: a namespace opens at
# the start of a line (`namespace a::b {`, `namespace {`) and closes with
# `}  // namespace`. Classes inside an anonymous namespace are their file's own and are not
# compared; nor are forward declarations, nested classes or specializations. Two definitions
# in one file are left to the compiler (alternatives under #if).
cmake_minimum_required(VERSION 3.25)
if(NOT DEFINED ROOT)
  message(FATAL_ERROR "usage: cmake -DROOT=<source tree> -P check_names.cmake")
endif()

file(GLOB folders RELATIVE "${ROOT}" "${ROOT}/*")
set(sources "")
foreach(folder IN LISTS folders)
  if(NOT IS_DIRECTORY "${ROOT}/${folder}" OR folder MATCHES "^([.]|build)")
    continue()
  endif()
  file(GLOB_RECURSE found RELATIVE "${ROOT}" "${ROOT}/${folder}/*.h" "${ROOT}/${folder}/*.cuh"
       "${ROOT}/${folder}/*.cc" "${ROOT}/${folder}/*.cu")
  list(APPEND sources ${found})
endforeach()

set(failures 0)
set(defined "")
foreach(source IN LISTS sources)
  # Only the lines that open or close a namespace or start a class (file(STRINGS) splits a
  # line at ';', so a forward declaration "struct X;" reads as "struct X", not a definition).
  file(STRINGS "${ROOT}/${source}" lines
       REGEX "^(namespace|}  // namespace|(struct|class) [A-Za-z_])")
  set(stack "")
  set(anonymous 0)
  set(mine "")
  foreach(line IN LISTS lines)
    if(line MATCHES "^namespace \\{")
      list(APPEND stack "<anonymous>")
      math(EXPR anonymous "${anonymous} + 1")
    elseif(line MATCHES "^namespace ([A-Za-z_][A-Za-z_0-9:]*) \\{")
      list(APPEND stack "${CMAKE_MATCH_1}")
    elseif(line MATCHES "^}  // namespace")
      list(LENGTH stack depth)
      if(depth GREATER 0)
        list(POP_BACK stack closed)
        if(closed STREQUAL "<anonymous>")
          math(EXPR anonymous "${anonymous} - 1")
        endif()
      endif()
    elseif(anonymous EQUAL 0 AND line MATCHES
                                 "^(struct|class) ([A-Za-z_][A-Za-z_0-9]*)( final)?( \\{| :|$)")
      list(JOIN stack "::" space)
      set(name "${space}::${CMAKE_MATCH_2}")
      if(name IN_LIST mine)
        continue()
      endif()
      list(APPEND mine "${name}")
      string(MAKE_C_IDENTIFIER "${name}" key)
      if(DEFINED "where_${key}")
        string(CONCAT text "${name} is defined twice, in ${where_${key}} and in ${source}: one "
               "name, one definition (rename one, or move the shared one into a header)")
        message("${text}")
        math(EXPR failures "${failures} + 1")
      else()
        set("where_${key}" "${source}")
        list(APPEND defined "${name}")
      endif()
    endif()
  endforeach()
endforeach()

list(LENGTH defined count)
if(failures GREATER 0)
  message(FATAL_ERROR "${failures} class name(s) defined twice in one namespace")
endif()
message("names: ${count} classes at namespace scope, each defined in one file")
