# The privileges the sandboxd container needs, as `docker run` options (sourced by
# scripts/container-e2e.sh; the README's "The container image" explains each).
SANDBOXD_CONTAINER_PRIVILEGES=(--privileged)
