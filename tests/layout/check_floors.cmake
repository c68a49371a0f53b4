# Fails when an #include runs up a floor of the README's layout table ("Layout of the code"),
# the one place that says which floor each folder stands on: a file may include its own room
# (the folders of its row) and the floors below it, never a floor above nor a room beside it
# on its own floor. Every folder the top-level CMakeLists.txt builds must have a row (or be
# one of the folders beside the floors: tests/, bench/).
#
#   cmake -DROOT=<source tree> -P check_floors.cmake
#
# Includes resolve as the compiler resolves them: beside the including file first, then from
# the root and from include/; one that reaches no floored folder (the standard library, a
# generated header) is not checked. Prints each violation, naming the file and the include,
# and fails.
cmake_minimum_required(VERSION 3.25)
if(NOT DEFINED ROOT)
  message(FATAL_ERROR "usage: cmake -DROOT=<source tree> -P check_floors.cmake")
endif()
set(beside tests bench)

# The table's rows: | floor | `folder/`[, `folder/`] | what | may use |
file(STRINGS "${ROOT}/README.md" rows REGEX "^\\| *[0-9]+ *\\| *`")
set(folders "")
foreach(row IN LISTS rows)
  string(REGEX MATCH "^\\| *([0-9]+) *\\| *([^|]*)\\|" _ "${row}")
  set(floor ${CMAKE_MATCH_1})
  string(REGEX MATCHALL "`[^`]+/`" cells "${CMAKE_MATCH_2}")
  set(room "")
  foreach(cell IN LISTS cells)
    string(REGEX REPLACE "^`(.*)/`$" "\\1" folder "${cell}")
    list(APPEND room "${folder}")
  endforeach()
  foreach(folder IN LISTS room)
    list(APPEND folders "${folder}")
    set("floor_of_${folder}" ${floor})
    list(JOIN room "," "room_of_${folder}")
  endforeach()
endforeach()
if(NOT folders)
  message(FATAL_ERROR "no layout table (| floor | `folder/` | ...) found in ${ROOT}/README.md")
endif()

set(failures 0)
macro(fail text)
  message("${text}")
  math(EXPR failures "${failures} + 1")
endmacro()

# The folder of the table that holds PATH (relative to the root), longest match first.
function(folder_of path out)
  set(best "")
  foreach(folder IN LISTS folders)
    string(LENGTH "${folder}" length)
    string(LENGTH "${best}" best_length)
    string(FIND "${path}/" "${folder}/" at)
    if(at EQUAL 0 AND length GREATER best_length)
      set(best "${folder}")
    endif()
  endforeach()
  set(${out} "${best}" PARENT_SCOPE)
endfunction()

# Every folder the build adds has a floor.
file(STRINGS "${ROOT}/CMakeLists.txt" added REGEX "^ *add_subdirectory\\(")
foreach(line IN LISTS added)
  string(REGEX REPLACE "^ *add_subdirectory\\(([^ )]+).*" "\\1" folder "${line}")
  if(NOT folder IN_LIST folders AND NOT folder IN_LIST beside)
    fail("CMakeLists.txt builds ${folder}/, which has no row in README.md's layout table")
  endif()
endforeach()

foreach(folder IN LISTS folders)
  file(GLOB_RECURSE sources RELATIVE "${ROOT}" "${ROOT}/${folder}/*.cc" "${ROOT}/${folder}/*.h"
       "${ROOT}/${folder}/*.cu" "${ROOT}/${folder}/*.cuh")
  foreach(source IN LISTS sources)
    folder_of("${source}" from)
    if(NOT from STREQUAL folder)
      continue()  # a subfolder with a row of its own: checked as that folder
    endif()
    get_filename_component(dir "${source}" DIRECTORY)
    file(STRINGS "${ROOT}/${source}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]")
    foreach(include IN LISTS includes)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[\"<]([^\">]+)[\">].*" "\\1" path "${include}")
      set(target "")
      foreach(base IN ITEMS "${dir}" "." "include")
        get_filename_component(candidate "${ROOT}/${base}/${path}" ABSOLUTE)
        if(EXISTS "${candidate}" AND NOT IS_DIRECTORY "${candidate}")
          file(RELATIVE_PATH target "${ROOT}" "${candidate}")
          break()
        endif()
      endforeach()
      if(target STREQUAL "" AND path MATCHES "^[.]")
        get_filename_component(candidate "${ROOT}/${dir}/${path}" ABSOLUTE)
        file(RELATIVE_PATH target "${ROOT}" "${candidate}")
      elseif(target STREQUAL "")
        set(target "${path}")  # not in the tree (yet): judged by its first folder
      endif()
      folder_of("${target}" to)
      if(to STREQUAL "" OR "${room_of_${to}}" STREQUAL "${room_of_${from}}")
        continue()
      endif()
      if(NOT floor_of_${to} LESS floor_of_${from})
        string(CONCAT text "${source}: #include \"${path}\" runs up a floor: ${from}/ stands on "
               "floor ${floor_of_${from}}, ${to}/ on floor ${floor_of_${to}} (README.md, "
               "\"Layout of the code\")")
        fail("${text}")
      endif()
    endforeach()
  endforeach()
endforeach()

list(LENGTH folders count)
if(failures GREATER 0)
  message(FATAL_ERROR "${failures} include(s) or folder(s) break the floors of README.md's layout table")
endif()
message("floors: the includes of ${count} folders keep README.md's layout table")
