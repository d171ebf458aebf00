# The fuzz targets, one file each (target_<name>.c), and the table that lists
# them (targets.c): built with libFuzzer by fuzz/CMakeLists.txt and replayed
# over fuzz/corpus and fuzz/regressions by tests/unit (unit_fuzz_replay).
set(KL_FUZZ_TARGET_NAMES lease status watch kubeconfig base64 exec_credential microtime etcd
  etcd_encode pod)
set(KL_FUZZ_TARGET_SOURCES ${CMAKE_CURRENT_LIST_DIR}/targets.c
  ${CMAKE_CURRENT_LIST_DIR}/etcd_checks.c)
foreach(name ${KL_FUZZ_TARGET_NAMES})
  list(APPEND KL_FUZZ_TARGET_SOURCES ${CMAKE_CURRENT_LIST_DIR}/target_${name}.c)
endforeach()
