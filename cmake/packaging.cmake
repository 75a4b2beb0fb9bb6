# The Debian package (CPack): `bash scripts/package.sh` builds
# sandboxd_<version>_<arch>.deb. Layout, as Debian's own packages have it:
#   /usr/bin/sandboxd                      the command
#   /usr/lib/sandboxd/sandboxd-init        PID 1 of every sandbox (a helper, not on PATH;
#                                          sandboxd finds it at ../lib/sandboxd/)
#   /usr/lib/sandboxd/sandboxd-gvisor-preload.so  preloaded in gvisor-tier sandboxes
#   /usr/lib/sandboxd/python_kernel_driver.py  the persistent Python's driver (read by
#                                          sandboxd, run in sandboxes by python3)
#   /etc/sandboxd/config.yaml              the configuration (a conffile)
#   /lib/systemd/system/sandboxd.service   the unit (Type=notify)
#   /usr/share/sandboxd/web, .../skills    the web assets and built-in skills, when the
#                                          source tree has them
#   /usr/share/man/man1/sandboxd.1.gz, /usr/share/doc/sandboxd/
#   /var/lib/sandboxd                      the data directory (made by postinst)
# `cpack` installs what the rules below name; it need not build the tests first.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON)
set(SANDBOXD_PACKAGING_DIR ${CMAKE_SOURCE_DIR}/packaging)
set(SANDBOXD_PACKAGE_STAGE ${CMAKE_BINARY_DIR}/package-stage)

install(TARGETS sandboxd RUNTIME DESTINATION bin)
install(TARGETS sandboxd-init RUNTIME DESTINATION lib/sandboxd)
install(TARGETS sandboxd-gvisor-preload LIBRARY DESTINATION lib/sandboxd)
install(FILES ${CMAKE_SOURCE_DIR}/helpers/python_kernel_driver.py DESTINATION lib/sandboxd)
install(FILES ${SANDBOXD_PACKAGING_DIR}/config.yaml DESTINATION /etc/sandboxd PERMISSIONS OWNER_READ OWNER_WRITE)
install(FILES ${SANDBOXD_PACKAGING_DIR}/sandboxd.service DESTINATION /lib/systemd/system)

# Other parts of the tree add these folders; the package carries them when they exist.
foreach(folder web skills)
  if(EXISTS ${CMAKE_SOURCE_DIR}/${folder})
    install(DIRECTORY ${CMAKE_SOURCE_DIR}/${folder}/ DESTINATION share/sandboxd/${folder}
            PATTERN "node_modules" EXCLUDE PATTERN ".*" EXCLUDE PATTERN "package.json" EXCLUDE
            PATTERN "package-lock.json" EXCLUDE)
  endif()
endforeach()

# Debian wants the man page and the changelog compressed with gzip -9n (no name, no
# time stamp: the same bytes every build).
add_custom_command(
  OUTPUT ${SANDBOXD_PACKAGE_STAGE}/sandboxd.1.gz
  COMMAND ${CMAKE_COMMAND} -E make_directory ${SANDBOXD_PACKAGE_STAGE}
  COMMAND sh -c "gzip -9n -c '${SANDBOXD_PACKAGING_DIR}/sandboxd.1' > '${SANDBOXD_PACKAGE_STAGE}/sandboxd.1.gz'"
  DEPENDS ${SANDBOXD_PACKAGING_DIR}/sandboxd.1 VERBATIM)
set(VERSION ${PROJECT_VERSION})
configure_file(${SANDBOXD_PACKAGING_DIR}/debian/changelog.in ${SANDBOXD_PACKAGE_STAGE}/changelog @ONLY)
add_custom_command(
  OUTPUT ${SANDBOXD_PACKAGE_STAGE}/changelog.gz
  COMMAND sh -c "gzip -9n -c '${SANDBOXD_PACKAGE_STAGE}/changelog' > '${SANDBOXD_PACKAGE_STAGE}/changelog.gz'"
  DEPENDS ${SANDBOXD_PACKAGE_STAGE}/changelog VERBATIM)
add_custom_target(sandboxd_package_docs ALL
  DEPENDS ${SANDBOXD_PACKAGE_STAGE}/sandboxd.1.gz ${SANDBOXD_PACKAGE_STAGE}/changelog.gz)
install(FILES ${SANDBOXD_PACKAGE_STAGE}/sandboxd.1.gz DESTINATION share/man/man1)
install(FILES ${SANDBOXD_PACKAGE_STAGE}/changelog.gz ${SANDBOXD_PACKAGING_DIR}/debian/copyright
        DESTINATION share/doc/sandboxd)
install(FILES ${SANDBOXD_PACKAGING_DIR}/debian/lintian-overrides DESTINATION share/lintian/overrides
        RENAME sandboxd)

# The maintainer scripts and conffiles list go into control.tar with the right modes.
set(SANDBOXD_CONTROL_STAGE ${SANDBOXD_PACKAGE_STAGE}/control)
file(MAKE_DIRECTORY ${SANDBOXD_CONTROL_STAGE})
foreach(script postinst prerm postrm)
  file(COPY ${SANDBOXD_PACKAGING_DIR}/debian/${script} DESTINATION ${SANDBOXD_CONTROL_STAGE}
       FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
endforeach()
file(COPY ${SANDBOXD_PACKAGING_DIR}/debian/conffiles DESTINATION ${SANDBOXD_CONTROL_STAGE}
     FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME sandboxd)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_CONTACT "sandboxd maintainers <maintainers@users.noreply.a-seed-46e295e7.example>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "isolated code execution for AI assistants")
# The synopsis above is the first line; CPack indents this body and turns the empty
# line into the paragraph separator.
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "sandboxd runs bash commands and file edits for AI assistants inside isolated,
per-conversation sandboxes (Linux namespaces, cgroups v1/v2, seccomp, ext4
volume images as size limits) and serves an Anthropic-compatible HTTP API:
the code_execution tool in /messages, containers, direct tool calls and the
Files API.

The package runs it as a systemd service on /etc/sandboxd/config.yaml with
its data in /var/lib/sandboxd.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # sandboxd_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Shared libraries from dpkg-shlibdeps on the binaries; then what sandboxd runs:
# mke2fs for every container's volume (e2fsprogs). bash-static (commands start without
# the dynamic loader) and python3 (the contract's runtime, on the host image) are
# recommended; debootstrap is only for `sandboxd image build`.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "e2fsprogs")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "bash-static, python3")
# runsc: runtime.isolation: gvisor (docs/isolation-tiers.md).
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "debootstrap, runsc")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${SANDBOXD_CONTROL_STAGE}/postinst ${SANDBOXD_CONTROL_STAGE}/prerm
    ${SANDBOXD_CONTROL_STAGE}/postrm ${SANDBOXD_CONTROL_STAGE}/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# Debian's binaries are stripped (the debug info would go to a -dbgsym package).
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/packages)
include(CPack)
