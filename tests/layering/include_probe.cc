// One translation unit that includes PROBE_HEADER (a quoted path, set per probe target) with a
// layer's include path: tests/layering/CMakeLists.txt builds it to show which headers a layer
// can and cannot see.
#include PROBE_HEADER
