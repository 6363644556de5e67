// The source of tessera_test_pch, the target whose precompiled header every test reuses (CMakeLists.txt):
// CMake builds a precompiled header only for a target that has a source to compile.
