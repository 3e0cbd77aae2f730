# dumpd_pytest_file(<name> <file> [TIMEOUT s] [RUN_SERIAL] [PYTHONPATH dir] [ENVIRONMENT k=v...]
#                   [INTERPRETER python] [LABEL label])
#
# INTERPRETER: the python that runs pytest (default: Python3_EXECUTABLE, Debian's); LABEL: the
# ctest label (default: integration).
# Registers a pytest file with ctest, labelled "integration", so that a skipped test shows in
# ctest's summary (tests/pytest_ctest.py holds the convention and enforces it):
# * tests marked `@pytest.mark.conditional` (may be skipped where the machine does not allow
#   them: root, a mount, a tool) each get their own entry, <name>.<test>, which ctest lists as
#   Skipped when pytest skips it (exit 77, SKIP_RETURN_CODE);
# * a file with a `pytestmark = ...pytest.mark.conditional` line runs as one such entry, <name>
#   (less the tests marked one by one, which keep their own);
# * the rest of the file runs as <name>, where a skip is an error.
# The scan reads the file's top-level `def test_` lines and the decorators right above them.
function(dumpd_pytest_file name test_file)
  cmake_parse_arguments(T "RUN_SERIAL" "TIMEOUT;PYTHONPATH;INTERPRETER;LABEL" "ENVIRONMENT"
                        ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  if(NOT T_INTERPRETER)
    set(T_INTERPRETER ${Python3_EXECUTABLE})
  endif()
  if(NOT T_LABEL)
    set(T_LABEL integration)
  endif()
  set(_path ${CMAKE_SOURCE_DIR}/tests)
  if(T_PYTHONPATH)
    string(APPEND _path ":${T_PYTHONPATH}")
  endif()
  set(_env PYTHONPATH=${_path} PYTHONDONTWRITEBYTECODE=1 ${T_ENVIRONMENT})
  get_filename_component(_dir ${test_file} DIRECTORY)
  set(_pytest ${T_INTERPRETER} -m pytest -q -rs -p no:cacheprovider -p pytest_ctest)

  file(STRINGS ${test_file} _lines
       REGEX "^(@pytest\\.mark\\.conditional|pytestmark = .*pytest\\.mark\\.conditional|def test_)")
  set(_whole FALSE)
  set(_pending FALSE)
  set(_conditional "")
  set(_others 0)
  foreach(_line IN LISTS _lines)
    if(_line MATCHES "^pytestmark")
      set(_whole TRUE)
    elseif(_line MATCHES "^@pytest")
      set(_pending TRUE)
    elseif(_line MATCHES "^def (test_[A-Za-z0-9_]+)")
      if(_pending)
        list(APPEND _conditional ${CMAKE_MATCH_1})
      else()
        math(EXPR _others "${_others} + 1")
      endif()
      set(_pending FALSE)
    endif()
  endforeach()

  set(_entries "")
  set(_main_args "")
  if(_whole)
    # Every test may be skipped; the ones marked one by one still get their own entry.
    set(_main_args --dumpd-conditional)
    if(_conditional)
      list(JOIN _conditional " or " _names)
      list(APPEND _main_args -k "not (${_names})")
    endif()
  elseif(_conditional)
    set(_main_args -m "not conditional")
  endif()
  if(_others GREATER 0)
    add_test(NAME ${name} COMMAND ${_pytest} ${_main_args} ${test_file}
             WORKING_DIRECTORY ${_dir})
    list(APPEND _entries ${name})
  endif()
  foreach(_test IN LISTS _conditional)
    add_test(NAME ${name}.${_test}
             COMMAND ${_pytest} --dumpd-conditional ${test_file}::${_test}
             WORKING_DIRECTORY ${_dir})
    list(APPEND _entries ${name}.${_test})
  endforeach()
  set_tests_properties(${_entries} PROPERTIES
    LABELS ${T_LABEL}
    TIMEOUT ${T_TIMEOUT}
    SKIP_RETURN_CODE 77
    RUN_SERIAL ${T_RUN_SERIAL}
    ENVIRONMENT "${_env}")
endfunction()
