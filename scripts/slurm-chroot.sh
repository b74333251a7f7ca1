#!/usr/bin/env bash
# Builds (once) the Debian 13 "trixie" chroot in which the dev cluster runs Slurm 24.11:
# debootstrap --variant=minbase, then slurmctld, slurmd, slurm-client and munge from trixie,
# plus what the host's Python (bind-mounted in by airlock.dev.cluster) needs to run there:
# libffi8 (ctypes; any Python build), libexpat1 (Debian 12's python3.11 itself links it).
#
#   bash scripts/slurm-chroot.sh          # build if missing or stale; print the chroot's path
#   bash scripts/slurm-chroot.sh --check  # exit 0 if it is built and current, 1 if not
#
# The chroot lives outside any checkout (AIRLOCK_CHROOT, default /var/cache/airlock/trixie) and
# is shared by every dev cluster on the machine; it is read-only for them. A stamp file next to
# it holds the recipe it was built from: while the stamp matches RECIPE below this script does
# nothing (milliseconds), and a changed recipe rebuilds it. A lock serialises concurrent builds.
#
# Root only. On the host it may `apt-get install debootstrap`, nothing else: trixie packages go
# into the chroot only, the host's /etc and apt sources are read, never written. The mounts apt
# needs in the chroot are made in a private mount namespace, so none of them shows on the host
# or outlives the build. The Debian mirror is the one the host's own apt sources name.
set -euo pipefail

ROOT=${AIRLOCK_CHROOT:-/var/cache/airlock/trixie}
STAMP=$ROOT.stamp
LOCK=$ROOT.lock
SUITE=trixie
PACKAGES="slurmctld slurmd slurm-client munge libffi8 libexpat1 util-linux mount"
# Bump the last field when the build steps change: every machine then rebuilds once.
RECIPE="suite=$SUITE variant=minbase packages=$PACKAGES recipe=2"

die() { echo "slurm-chroot: $*" >&2; exit 1; }
current() { [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$RECIPE" ] && [ -x "$ROOT/usr/sbin/slurmctld" ]; }

if [ "${1:-}" = --check ]; then
  current && exit 0
  echo "slurm-chroot: $ROOT is missing or stale: run bash scripts/slurm-chroot.sh" >&2
  exit 1
fi
[ $# -eq 0 ] || die "usage: slurm-chroot.sh [--check]"

if current; then echo "$ROOT"; exit 0; fi
[ "$(id -u)" = 0 ] || die "building the chroot needs root"

mirror() {  # the host's Debian mirror (not its security mirror), deb822 or one-line format
  local m=""
  if compgen -G "/etc/apt/sources.list.d/*.sources" >/dev/null; then
    m=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i !~ /security/) { print $i; exit } }' \
        /etc/apt/sources.list.d/*.sources)
  fi
  if [ -z "$m" ] && [ -f /etc/apt/sources.list ]; then
    m=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {
                if ($i !~ /security/) { print $i; exit } else break } }' /etc/apt/sources.list)
  fi
  echo "${m:-http://deb.debian.org/debian}"
}

mkdir -p "$(dirname "$ROOT")"
exec 9>"$LOCK"
flock 9
if current; then echo "$ROOT"; exit 0; fi  # another process built it while we waited

if ! command -v debootstrap >/dev/null; then
  echo "slurm-chroot: installing debootstrap on the host" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends debootstrap >/dev/null \
    || die "could not install debootstrap"
fi

MIRROR=$(mirror)
NEW=$ROOT.new
LOG=$ROOT.build.log
t0=$SECONDS
rm -rf --one-file-system "$NEW"
: >"$LOG"
echo "slurm-chroot: debootstrap $SUITE from $MIRROR into $NEW (log: $LOG)" >&2
debootstrap --variant=minbase "$SUITE" "$NEW" "$MIRROR" >>"$LOG" 2>&1 \
  || die "debootstrap failed, see $LOG"
# No maintainer script may start a service inside the chroot.
printf '#!/bin/sh\nexit 101\n' >"$NEW/usr/sbin/policy-rc.d"
chmod 755 "$NEW/usr/sbin/policy-rc.d"
# minbase has no /etc/hosts; the dev cluster binds its own over this one at run time.
printf '127.0.0.1 localhost\n' >"$NEW/etc/hosts"
echo "slurm-chroot: apt-get install $PACKAGES (in the chroot)" >&2
# shellcheck disable=SC2016  # expanded by the inner shell
unshare --mount --propagation private -- sh -euc '
  r=$1; shift
  mount -t proc proc "$r/proc"
  mount -t sysfs sysfs "$r/sys"
  mount --bind /dev "$r/dev"
  mount --bind /dev/pts "$r/dev/pts"
  mount -t tmpfs -o mode=0755 tmpfs "$r/run"
  chroot "$r" apt-get update -q
  chroot "$r" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
  chroot "$r" apt-get clean
' chroot "$NEW" $PACKAGES >>"$LOG" 2>&1 || die "apt-get in the chroot failed, see $LOG"
version=$(chroot "$NEW" /usr/sbin/slurmctld -V 2>&1) || die "slurmctld -V failed in the chroot"
# The marker by which the dev cluster's client wrappers know they already run inside it.
echo "$RECIPE" >"$NEW/etc/airlock-chroot"

if [ -e "$ROOT" ]; then  # a stale build: clusters still running on it keep their open files
  mv "$ROOT" "$ROOT.old.$$"
  rm -rf --one-file-system "$ROOT.old.$$"
fi
mv "$NEW" "$ROOT"
echo "$RECIPE" >"$STAMP"
echo "slurm-chroot: built $ROOT ($version) in $((SECONDS - t0)) s" >&2
echo "$ROOT"
