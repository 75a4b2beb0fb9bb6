# The privileges the sandboxd container needs, as `docker run` options (sourced by
# scripts/container-e2e.sh; docs/install.md, "The container image", says why each is needed).
SANDBOXD_CONTAINER_PRIVILEGES=(
  --cap-add SYS_ADMIN            # mounts, pivot_root, namespaces, loop devices
  --cap-add NET_ADMIN            # bringing up each sandbox's loopback
  --security-opt seccomp=unconfined   # Docker's profile refuses pivot_root; sandboxes apply their own filter
  --security-opt apparmor=unconfined  # docker-default's AppArmor profile refuses mount
  --cgroupns host -v /sys/fs/cgroup:/sys/fs/cgroup   # a writable cgroup tree for per-sandbox limits
  --device /dev/loop-control --device-cgroup-rule 'b 7:* rwm'   # ext4 volumes on loop devices
)
