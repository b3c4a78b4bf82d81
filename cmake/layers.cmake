# Include roots per layer, so that the build enforces who may include whom (docs/architecture.md,
# "Layers"). A layer's headers are visible only to the targets that link it: each layer target
# gets an include root of its own under <build>/include/<target>/, holding symbolic links to its
# source directories only, and exposes that root PUBLIC. Includes keep their spelling
# ("server/runtime/backend.h"); a target that does not link the runtime finds no such file.

# matserve_expose(<target> <PUBLIC|PRIVATE|INTERFACE> <path>...): makes the repository paths
# (directories or single headers) includable by <target> (and, unless PRIVATE, by what links it).
function(matserve_expose target scope)
  set(root ${CMAKE_BINARY_DIR}/include/${target})
  foreach(path IN LISTS ARGN)
    if(NOT EXISTS ${CMAKE_SOURCE_DIR}/${path})
      message(FATAL_ERROR "matserve_expose(${target}): ${path} does not exist")
    endif()
    get_filename_component(parent ${root}/${path} DIRECTORY)
    file(MAKE_DIRECTORY ${parent})
    file(CREATE_LINK ${CMAKE_SOURCE_DIR}/${path} ${root}/${path} SYMBOLIC)
  endforeach()
  target_include_directories(${target} ${scope} ${root})
endfunction()
