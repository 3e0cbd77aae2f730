# The Debian package (scripts/package runs `cpack -G DEB` on a Release build with prefix /usr).
# CPack rather than debhelper: the package is made from the same CMake install rules that
# `cmake --install` uses, with no second description of the file list to keep in step; the
# parts debhelper would generate (maintainer-script snippets for systemd units, conffiles,
# shlibdeps) are written out in packaging/debian/ and below. See docs/packaging.md.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME dumpd)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "dumpd maintainers <dumpd@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "node daemon that writes training tensors in MindSpore's dump layout")
# The long description (CPack puts the summary above it and indents each line).
string(CONCAT CPACK_DEBIAN_PACKAGE_DESCRIPTION
       "dumpd is one daemon per node, shared by every training job on it. Training\n"
       "processes link its client library (C++, or the Python package for PyTorch), copy\n"
       "each tensor once into a shared-memory ring and go on; dumpd filters and writes the\n"
       "MindSpore dump tree (rank_{id}/{net}/{graph}/{iteration}/*.npy, statistic.csv)\n"
       "off the critical path. Includes dumpctl, the systemd units, the C++ client library\n"
       "with headers, CMake and pkg-config files, and the Python package for python3.\n"
       "\n")
if(DUMPD_HAVE_CUDA)
  string(APPEND CPACK_DEBIAN_PACKAGE_DESCRIPTION
         "Built with CUDA: the client copies CUDA tensors on the device (static CUDA runtime).")
else()
  string(APPEND CPACK_DEBIAN_PACKAGE_DESCRIPTION
         "Built without CUDA: CUDA tensors need the client's cuda_fallback=\"host\".")
endif()
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # dumpd_<version>_<arch>.deb
# Depends: from the shared libraries the binaries link (dpkg-shlibdeps), plus what no ELF file
# says: the Python module's interpreter, the tools the maintainer scripts call.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
execute_process(COMMAND ${Python3_EXECUTABLE} -c "import sys; print('%d.%d' % sys.version_info[:2])"
                OUTPUT_VARIABLE _py OUTPUT_STRIP_TRAILING_WHITESPACE)
string(REGEX REPLACE "^([0-9]+)\\.([0-9]+)$" "\\2" _py_minor "${_py}")
math(EXPR _py_next "${_py_minor} + 1")
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "python3 (>= ${_py}), python3 (<< 3.${_py_next}), init-system-helpers (>= 1.52), systemd | adduser")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3-numpy")
# Absolute destinations (/etc/dumpd) go into the package, not onto the build machine.
set(CPACK_SET_DESTDIR ON)
set(CPACK_STRIP_FILES ON)
foreach(script postinst prerm postrm)
  configure_file(${CMAKE_SOURCE_DIR}/packaging/debian/${script}.in
                 ${CMAKE_BINARY_DIR}/packaging/${script} @ONLY
                 FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                                  WORLD_READ WORLD_EXECUTE)
endforeach()
file(WRITE ${CMAKE_BINARY_DIR}/packaging/conffiles "/etc/dumpd/dumpd.json\n")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${CMAKE_BINARY_DIR}/packaging/postinst ${CMAKE_BINARY_DIR}/packaging/prerm
    ${CMAKE_BINARY_DIR}/packaging/postrm ${CMAKE_BINARY_DIR}/packaging/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
