#!/usr/bin/env bash
# `make test-fresh`: the whole `make test` of a clean clone, on a brand-new Debian machine.
#
# The "machine" is a container from a Debian root file system made by debootstrap (no image
# registry is needed), with nothing of this machine's state: no venv, no /var/tmp, no test
# users, no keys, no npm or pip caches, no apt packages beyond a minimal Debian with Python
# 3.11. It gets only what every machine of ours is given before the project's own files run:
# Node 20 (as /usr/bin/node and npm), the package registries' settings (pip's, npm's and the
# CA certificates they need), and the machine's local wheel indexes read-only. Everything else
# (PostgreSQL, sshd, screen, Chromium, libfaketime, the venv, node_modules) is installed by
# `make test` itself, as on CI.
#
# Usage: tests/fresh/run.sh [REV]   (default HEAD: what is committed, as CI sees it)
# Needs root and Docker (installed from Debian's docker.io when missing). Output goes to
# $GPUHIVE_FRESH_LOG (default /var/log/gpuhive-test-fresh.log); the last line says how long it took.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
REV=${1:-HEAD}
BASE_IMAGE=gpuhive-fresh-base:bookworm
LOG=${GPUHIVE_FRESH_LOG:-/var/log/gpuhive-test-fresh.log}
MIRROR=${GPUHIVE_DEBIAN_MIRROR:-http://deb.debian.org/debian}

[ "$(id -u)" = 0 ] || { echo "test-fresh needs root (Docker, debootstrap)" >&2; exit 1; }

need=""
command -v dockerd >/dev/null || need="$need docker.io"
command -v debootstrap >/dev/null || need="$need debootstrap"
if [ -n "$need" ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need
fi
if ! docker info >/dev/null 2>&1; then
  (dockerd >/var/log/gpuhive-dockerd.log 2>&1 &)
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "dockerd did not start: see /var/log/gpuhive-dockerd.log" >&2; exit 1; }
fi

# The base image is a plain Debian: nothing of the project's or of an earlier run is in it,
# so it is kept between runs (debootstrap takes a few minutes).
if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  rootfs=$(mktemp -d /var/tmp/gpuhive-rootfs.XXXXXX)
  trap 'rm -rf "$rootfs"' EXIT
  debootstrap --variant=minbase \
    --include=python3,python3-venv,git,make,ca-certificates,procps,sudo,xz-utils,curl \
    bookworm "$rootfs" "$MIRROR"
  tar -C "$rootfs" -c . | docker import - "$BASE_IMAGE"
  rm -rf "$rootfs"
  trap - EXIT
fi

# What every machine of ours has before the project runs (see the header), read-only.
mounts=(-v "$REPO/.git:/origin.git:ro" -v /usr/bin/node:/usr/bin/node:ro
        -v /usr/lib/node_modules:/usr/lib/node_modules:ro)
for path in /etc/pip.conf /root/.config/pip/pip.conf /etc/npmrc /root/.npmrc /opt/wheels \
            /opt/pypi /opt/pypi-more /usr/local/share/ca-certificates; do
  [ -e "$path" ] && mounts+=(-v "$path:$path:ro")
done
# ... and the machine's settings that point the clients at that CA bundle and those indexes.
for name in NODE_EXTRA_CA_CERTS SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE CURL_CA_BUNDLE \
            GIT_SSL_CAINFO PIP_CERT PIP_FIND_LINKS PIP_DEFAULT_TIMEOUT PIP_DISABLE_PIP_VERSION_CHECK; do
  [ -n "${!name:-}" ] && mounts+=(-e "$name=${!name}")
done
commit=$(git -C "$REPO" rev-parse "$REV")

start=$(date +%s)
echo "test-fresh: $commit on a new $BASE_IMAGE container; log: $LOG"
set +e
# --privileged is refused where Docker itself runs in a sandbox; the tests need these:
# network namespaces and nftables (NET_ADMIN, SYS_ADMIN), ps of other users (SYS_PTRACE),
# priorities set back by the sweep benchmark (SYS_NICE): what root has on a real machine; and
# a writable cgroup tree for the Docker the container tests and benchmark start inside it.
docker run --rm --cap-add NET_ADMIN --cap-add SYS_ADMIN --cap-add SYS_PTRACE --cap-add NET_RAW \
  --cap-add SYS_NICE -v /sys/fs/cgroup:/sys/fs/cgroup:rw \
  --security-opt seccomp=unconfined --security-opt apparmor=unconfined --network host --shm-size 1g -e CI=true "${mounts[@]}" \
  "$BASE_IMAGE" bash -euo pipefail -c "
    update-ca-certificates >/dev/null 2>&1 || true
    ln -sf ../lib/node_modules/npm/bin/npm-cli.js /usr/bin/npm
    ln -sf ../lib/node_modules/npm/bin/npx-cli.js /usr/bin/npx
    echo \"machine: \$(nproc) cores, python \$(python3 -V), node \$(node --version); /var/tmp: \$(ls -A /var/tmp | wc -l) entries\"
    git clone -q /origin.git /src && cd /src && git checkout -q $commit
    time bash .ci/run
  " >"$LOG" 2>&1
status=$?
set -e
tail -n 40 "$LOG"
echo "test-fresh: exit $status after $(( ($(date +%s) - start) / 60 )) min $(( ($(date +%s) - start) % 60 )) s"
exit $status
