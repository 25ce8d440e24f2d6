# Writes OUT (a header) with the commit of SOURCE_DIR, run at every build so that the binary
# names the commit it was built from; the file changes only when the commit or the dirty state
# does, so an unchanged tree rebuilds nothing.
execute_process(
  COMMAND git -C "${SOURCE_DIR}" describe --always --dirty --abbrev=12
  OUTPUT_VARIABLE ADAKV_COMMIT
  OUTPUT_STRIP_TRAILING_WHITESPACE
  ERROR_QUIET)
if(NOT ADAKV_COMMIT)
  set(ADAKV_COMMIT "unknown")
endif()
set(text "#pragma once\n#define ADAKV_VERSION \"${VERSION}\"\n#define ADAKV_COMMIT \"${ADAKV_COMMIT}\"\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
