// Preloaded (/etc/ld.so.preload) into every program of a gvisor-tier sandbox.
//
// Debian's runsc (0.0~20221219) refuses AT_NO_AUTOMOUNT in statx and fstatat with
// EINVAL, and coreutils passes it on every statx: `ls -l`, `stat`, `cp -a`, `find
// -newer` all fail on every file. The flag only keeps an automount point from being
// triggered, and gVisor has none, so dropping it changes nothing else. Programs that
// make the system call themselves (static binaries, Go) are not helped; later runsc
// releases accept the flag and make this a no-op.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

extern "C" {

__attribute__((visibility("default"))) int statx(int dirfd, const char* path, int flags, unsigned int mask,
                                                 struct statx* buffer) {
  return static_cast<int>(syscall(SYS_statx, dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buffer));
}

__attribute__((visibility("default"))) int fstatat(int dirfd, const char* path, struct stat* buffer,
                                                   int flags) {
  return static_cast<int>(syscall(SYS_newfstatat, dirfd, path, buffer, flags & ~AT_NO_AUTOMOUNT));
}

__attribute__((visibility("default"))) int fstatat64(int dirfd, const char* path, struct stat64* buffer,
                                                     int flags) {
  return static_cast<int>(syscall(SYS_newfstatat, dirfd, path, buffer, flags & ~AT_NO_AUTOMOUNT));
}

}  // extern "C"
