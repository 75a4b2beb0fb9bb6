// A container's size-limited volume: a sparse file holding an ext4 file system with a
// journal, loop-mounted on the host while the container is in use. Writes past its size
// fail inside the sandbox with ENOSPC and never damage what was written before. (This
// kernel has no ext4/XFS quota support, so project quotas are not an option; a loop
// image works on any kernel with loop and ext4.)
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <boost/system/result.hpp>

namespace sandboxd::runtime {

// Why the host could not make or attach a volume, when that is the host's state rather
// than a bug: callers answer 503 (try again later), not 500.
enum class VolumeError {
  kNoSpace,       // the disk holding the images is full
  kFormatFailed,  // mke2fs failed (typically for want of space)
  kNoLoopDevice,  // every loop device is in use
};
std::ostream& operator<<(std::ostream& out, VolumeError error);

template <typename T>
using VolumeResult = boost::system::result<T, VolumeError>;

[[noreturn]] void throw_exception_from_error(VolumeError error, const boost::source_location& loc);

struct Volume {
  // Creates and formats the image, its root owned by uid:gid. Runs mke2fs: off the
  // request path. An expected failure is a VolumeError; the unexpected (mke2fs not
  // installed, a failing rename) throws SyscallError.
  static VolumeResult<void> create(const std::string& image, uint64_t size_bytes, uint32_t uid, uint32_t gid);
  // Makes `image` a copy of `pristine`, an image `create` made that was never mounted:
  // its allocated extents copied into a sparse file of the same size, with a UUID and a
  // directory hash seed of its own in the superblock and its backups (`create` formats with
  // metadata_csum_seed, so no other checksum depends on the UUID). Well under a
  // millisecond where mke2fs takes several, most of it the exec of a dynamically linked
  // program. kNoSpace when the disk is full, kFormatFailed when `pristine` is not such an
  // image; the unexpected throws SyscallError.
  static VolumeResult<void> copy_pristine(const std::string& pristine, const std::string& image);
  // Copies the image of the volume mounted at `target` into `copy` while its file system
  // is frozen (FIFREEZE: the kernel writes everything out, the journal included, and
  // holds every new write until the thaw), so the copy is a clean, consistent file system
  // that `copy_pristine` accepts, taken while the sandbox over it runs on. A reflink
  // (FICLONE) where the file system holding the images shares extents (XFS, btrfs), else
  // the allocated extents into a sparse file. Returns the bytes the copy takes on disk.
  // kNoSpace when the disk is full; the unexpected throws SyscallError (the volume is
  // thawed on every path).
  static VolumeResult<uint64_t> copy_frozen(const std::string& image, const std::string& target,
                                            const std::string& copy);
  // Attaches the image to a free loop device (auto-clearing) and mounts it at target.
  // kNoLoopDevice when none is free (or SANDBOXD_FAILPOINT_NO_LOOP_DEVICE=1 says so, for
  // tests and drills); anything else unexpected throws SyscallError.
  static VolumeResult<void> mount(const std::string& image, const std::string& target);
  // Unmounts target (the loop device detaches itself); a busy mount is detached lazily.
  static void unmount(const std::string& target);
  // Unmounts target only if nothing uses it; false when busy. Never detaches lazily, so
  // the image can never end up mounted twice.
  static bool try_unmount(const std::string& target);
  static bool is_mounted(const std::string& target);
  // Moves a mounted volume to another mount point (cheap: no unmount, no fsck).
  static void move(const std::string& from, const std::string& to);
  // Makes `dir` a mount point of its own with private propagation, so that mounts below
  // it can be moved (MS_MOVE refuses under a shared parent, systemd's default) and
  // never propagate elsewhere.
  static void make_private_mount(const std::string& dir);
  // Makes `dir` a mount point of its own in a new peer group (shared propagation): a
  // slot whose later mounts reach the slave sandbox that binds it.
  static void make_shared_mount(const std::string& dir);
  // Binds `source` onto `target` with nosuid,nodev (and read-only) already set when the
  // mount appears, so that copies propagated into a sandbox carry them too.
  // `recursive` takes the mounts below `source` along (and keeps receiving new ones).
  static void attach_bind(const std::string& source, const std::string& target, bool read_only,
                          bool recursive = false);
  // Unmounts the tree on `target` without propagating the unmount to its peers (the
  // tree is made private first): what a slot's copy of a shared folder needs.
  static void detach_private(const std::string& target);
  // Mount points at or below `prefix` (deepest first), from /proc/self/mountinfo.
  static std::vector<std::string> mounts_under(const std::string& prefix);
};

}  // namespace sandboxd::runtime
