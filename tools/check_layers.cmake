# check_layers.cmake — the build check for upward includes (ctest `layers`, CMakeLists.txt).
#
# Run as: cmake -DSOURCE_DIR=... -DWORK_DIR=... -DC_COMPILER=... -DLAYERS=cli,...,core
#               -DSYSTEM_INCLUDES=DIR,DIR -P check_layers.cmake
#
# LAYERS lists the source folders top to bottom; a folder may use its own headers and those of the
# folders after it.  A header include/baton/X.h belongs to the folder holding X.c (the module it
# declares; the lowest such folder: cli/report.c is a command, orchestrator/report.c the
# module); s_owner below names the folder of each header without a same-named .c.  For every
# folder this builds WORK_DIR/<folder>/baton/ holding copies of only the headers it may use, then
# compiles, with -fsyntax-only against that tree alone (never include/):
#   - every .c of the folder, and
#   - every header of the folder on its own (so a header is self-contained and includes nothing
#     from above its floor);
# and baton.h, the embedding API, with nothing but status.h beside it.
# An upward include fails as "baton/controller.h: No such file or directory", named with the file
# that asked for it.  The check reads the sources as they are now: no configure step is needed
# after a new file or a new include.

cmake_minimum_required(VERSION 3.18)
foreach(v SOURCE_DIR WORK_DIR C_COMPILER LAYERS)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "check_layers: -D${v}=... is required")
  endif()
endforeach()
# Lists arrive comma-separated (a ctest command line would split them at ';').
string(REPLACE "," ";" LAYERS "${LAYERS}")
string(REPLACE "," ";" SYSTEM_INCLUDES "${SYSTEM_INCLUDES}")

# Headers whose module has no .c of the same name: header -> folder.
set(s_owner_tensor.h tensor)        # tensor/aten_shim.cpp
set(s_owner_baton.h orchestrator)   # the embedding API, orchestrator/run.c

# Each header's folder: the lowest that holds its .c.
set(s_bottom_up ${LAYERS})
list(REVERSE s_bottom_up)
file(GLOB s_headers RELATIVE ${SOURCE_DIR}/include/baton ${SOURCE_DIR}/include/baton/*.h)
set(s_problems "")
foreach(h ${s_headers})
  string(REGEX REPLACE "\\.h$" "" stem ${h})
  set(owner "")
  if(DEFINED s_owner_${h})
    set(owner ${s_owner_${h}})
  else()
    foreach(layer ${s_bottom_up})  # cli/report.c is a command, orchestrator/report.c the module
      if(EXISTS ${SOURCE_DIR}/${layer}/${stem}.c)
        set(owner ${layer})
        break()
      endif()
    endforeach()
  endif()
  if(owner STREQUAL "")
    string(APPEND s_problems "  include/baton/${h}: no folder holds ${stem}.c; name its folder in tools/check_layers.cmake (s_owner_${h})\n")
  else()
    list(APPEND s_headers_of_${owner} ${h})
  endif()
endforeach()

set(s_flags -std=c11 -fsyntax-only -Wall -Wextra -Werror -Wno-unused-parameter)
set(s_sys "")
foreach(d ${SYSTEM_INCLUDES})
  list(APPEND s_sys -isystem ${d})
endforeach()

file(REMOVE_RECURSE ${WORK_DIR})
list(LENGTH LAYERS n_layers)
set(n_checked 0)
set(i 0)
foreach(layer ${LAYERS})
  # The tree: this folder's headers and those of every folder below it.
  set(tree ${WORK_DIR}/${layer})
  file(MAKE_DIRECTORY ${tree}/baton)
  set(below ${LAYERS})
  if(i GREATER 0)
    list(SUBLIST LAYERS ${i} -1 below)
  endif()
  foreach(b ${below})
    foreach(h ${s_headers_of_${b}})
      file(COPY ${SOURCE_DIR}/include/baton/${h} DESTINATION ${tree}/baton)
    endforeach()
  endforeach()

  # Units as "path-compiled|name-reported": the folder's .c files, then its headers alone.
  file(GLOB srcs RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/${layer}/*.c)
  set(units "")
  foreach(src ${srcs})
    list(APPEND units "${SOURCE_DIR}/${src}|${src}")
  endforeach()
  foreach(h ${s_headers_of_${layer}})
    list(APPEND units "${tree}/baton/${h}|include/baton/${h} (alone)")
  endforeach()
  foreach(unit ${units})
    string(REPLACE "|" ";" unit "${unit}")
    list(GET unit 0 path)
    list(GET unit 1 name)
    execute_process(COMMAND ${C_COMPILER} ${s_flags} -x c -I ${tree} ${s_sys} ${path}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    math(EXPR n_checked "${n_checked} + 1")
    if(NOT rc EQUAL 0)
      string(REGEX MATCH "[^\n]*error:[^\n]*" first "${out}")
      string(REPLACE "${WORK_DIR}/${layer}/" "" first "${first}")
      string(APPEND s_problems "  ${name}: ${first}\n")
    endif()
  endforeach()
  math(EXPR i "${i} + 1")
endforeach()

# The embedding API is self-contained: baton.h compiles with status.h alone beside it, as C11
# under -pedantic (no tensor.h, no config struct: a host sees opaque types and a few functions).
set(tree ${WORK_DIR}/_embedding)
file(MAKE_DIRECTORY ${tree}/baton)
file(COPY ${SOURCE_DIR}/include/baton/baton.h ${SOURCE_DIR}/include/baton/status.h
     DESTINATION ${tree}/baton)
execute_process(COMMAND ${C_COMPILER} ${s_flags} -pedantic -x c -I ${tree} ${tree}/baton/baton.h
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
math(EXPR n_checked "${n_checked} + 1")
if(NOT rc EQUAL 0)
  string(REGEX MATCH "[^\n]*error:[^\n]*" first "${out}")
  string(REPLACE "${tree}/" "" first "${first}")
  string(APPEND s_problems "  include/baton/baton.h (with status.h only): ${first}\n")
endif()

if(NOT s_problems STREQUAL "")
  message(FATAL_ERROR "check_layers: an include points above its floor (order, top to bottom: "
          "${LAYERS}; a folder sees only its own headers and those below):\n${s_problems}")
endif()
message(STATUS "check_layers: ${n_checked} files of ${n_layers} floors include only what is below them")
