// See tests/gpu/CMakeLists.txt.
