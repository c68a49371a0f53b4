# The name check must catch what it is there for: plants pairs of files into a scratch tree
# and expects check_names.cmake to refuse two definitions of one class in one namespace,
# naming both files, and to accept what C++ allows (other namespaces, anonymous ones, forward
# declarations, specializations, alternatives in one file).
#
#   cmake -DWORK=<scratch folder> -P check_names_test.cmake
cmake_minimum_required(VERSION 3.25)
set(check "${CMAKE_CURRENT_LIST_DIR}/check_names.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/run_check.cmake")
set(failures 0)

# Runs the check on a tree of two files, A and B, with texts A_TEXT and B_TEXT; EXPECT is
# "pass" or a regex that the refusal must match.
function(plant name a a_text b b_text expect)
  set(tree "${WORK}/${name}")
  file(REMOVE_RECURSE "${tree}")
  file(WRITE "${tree}/${a}" "${a_text}")
  file(WRITE "${tree}/${b}" "${b_text}")
  run_check("${check}" "${tree}" ${name} "${expect}" ok)
  if(NOT ok)
    set(failures 1 PARENT_SCOPE)
  endif()
endfunction()

set(shape_a "#pragma once\nnamespace hsring::train {\n\nstruct Shape {\n  int width = 0;\n};\n\n}  // namespace hsring::train\n")
set(shape_b "#pragma once\nnamespace hsring::train {\n\nstruct Shape {\n  double eps = 0;\n};\n\n}  // namespace hsring::train\n")
plant(same_namespace train/a.h "${shape_a}" train/b.h "${shape_b}"
      "hsring::train::Shape is defined twice, in train/a.h and in train/b.h")
plant(nested_spelling train/a.h "${shape_a}" model/b.cc
      "namespace hsring {\nnamespace train {\n\nclass Shape final : public Base {\n};\n\n}  // namespace train\n}  // namespace hsring\n"
      "hsring::train::Shape is defined twice")
plant(after_anonymous train/a.h "${shape_a}" train/b.cc
      "namespace hsring::train {\nnamespace {\nstruct Local {};\n}  // namespace\n\nstruct Shape {\n};\n\n}  // namespace hsring::train\n"
      "hsring::train::Shape is defined twice")

plant(other_namespace train/a.h "${shape_a}" model/b.h
      "#pragma once\nnamespace hsring::model {\n\nstruct Shape {\n};\n\n}  // namespace hsring::model\n" pass)
set(local "namespace hsring::train {\nnamespace {\n\nstruct Shape {\n  float eps;\n};\n\n}  // namespace\n}  // namespace hsring::train\n")
plant(anonymous train/a.cc "${local}" train/b.cc "${local}" pass)
plant(declaration train/a.h "${shape_a}" train/b.h
      "#pragma once\nnamespace hsring::train {\n\nstruct Shape;\ntemplate <class T>\nstruct Traits;\ntemplate <>\nstruct Traits<Shape> {\n};\n\n}  // namespace hsring::train\n" pass)
plant(alternatives train/a.h "${shape_a}" train/b.cuh
      "#pragma once\nnamespace hsring::gpu {\n#ifdef __CUDACC__\nstruct Pair {\n  int a;\n};\n#else\nstruct Pair {\n  long a;\n};\n#endif\n}  // namespace hsring::gpu\n" pass)
plant(build_folder train/a.h "${shape_a}" build/generated/a.h "${shape_b}" pass)

if(failures)
  message(FATAL_ERROR "check_names.cmake missed a planted definition or refused a legal one")
endif()
message("check_names.cmake refuses each planted second definition and accepts the legal ones")
