#!/usr/bin/env bash
# Builds (once) the Debian chroots in which the dev cluster runs the Slurm releases the host
# does not ship: Debian 13 "trixie" (Slurm 24.11) and Debian sid (Slurm 26.05). Each is
# debootstrap --variant=minbase, then slurmctld, slurmd, slurm-client and munge from that suite,
# plus what the host's Python (bind-mounted in by airlock.dev.cluster) needs to run there:
# libffi8 (ctypes; any Python build), libexpat1 (Debian 12's python3.11 itself links it).
#
#   bash scripts/slurm-chroot.sh [SUITE...]          # build each if missing or stale; print paths
#   bash scripts/slurm-chroot.sh --check [SUITE...]  # exit 0 if each is built and current, else 1
#
# SUITE is trixie (the default) or sid; the Slurm release may stand for it (24.11, 26.05).
# The chroots live outside any checkout, in AIRLOCK_CHROOT_DIR (default /var/cache/airlock):
# <dir>/trixie, <dir>/sid. Every dev cluster on the machine shares them, read-only. A stamp file
# next to each holds the recipe it was built from: while the stamp matches, this script does
# nothing (milliseconds), and a changed recipe rebuilds it. A lock per chroot serialises builds.
#
# sid is a moving target, so the chroot is what sid held when it was built: the recipe, not the
# day, decides a rebuild. apt in there runs with Acquire::Check-Valid-Until=false: the mirror's
# sid Release file can be past its Valid-Until (seen on this machine's mirror), which apt would
# otherwise refuse; the file's signature is still checked.
#
# Root only. On the host it may `apt-get install debootstrap`, nothing else: the chroots'
# packages go into the chroots only, the host's /etc and apt sources are read, never written.
# The mounts apt needs in a chroot are made in a private mount namespace, so none of them shows
# on the host or outlives the build. The Debian mirror is the one the host's own apt sources name.
set -euo pipefail

DIR=${AIRLOCK_CHROOT_DIR:-/var/cache/airlock}
PACKAGES="slurmctld slurmd slurm-client munge libffi8 libexpat1 util-linux mount"

die() { echo "slurm-chroot: $*" >&2; exit 1; }

suite_of() {
  case "$1" in
    trixie|24.11) echo trixie ;;
    sid|26.05) echo sid ;;
    *) die "unknown suite $1 (trixie or 24.11, sid or 26.05)" ;;
  esac
}

recipe() {  # bump a suite's last field when its build steps change: every machine rebuilds once
  case "$1" in
    trixie) echo "suite=trixie variant=minbase packages=$PACKAGES recipe=2" ;;
    sid) echo "suite=sid variant=minbase packages=$PACKAGES recipe=1" ;;
  esac
}

current() {  # suite
  local root=$DIR/$1
  [ -f "$root.stamp" ] && [ "$(cat "$root.stamp")" = "$(recipe "$1")" ] \
    && [ -x "$root/usr/sbin/slurmctld" ]
}

check=0
if [ "${1:-}" = --check ]; then check=1; shift; fi
suites=()
for a in "${@:-trixie}"; do
  case "$a" in -*) die "usage: slurm-chroot.sh [--check] [trixie|sid|24.11|26.05 ...]" ;; esac
  suites+=("$(suite_of "$a")")
done

if [ "$check" = 1 ]; then
  rc=0
  for s in "${suites[@]}"; do
    current "$s" && continue
    echo "slurm-chroot: $DIR/$s is missing or stale: run bash scripts/slurm-chroot.sh $s" >&2
    rc=1
  done
  exit "$rc"
fi

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

build() {  # suite: build $DIR/<suite> unless current; print its path
  local suite=$1 root=$DIR/$1 want
  want=$(recipe "$suite")
  if current "$suite"; then echo "$root"; return; fi
  [ "$(id -u)" = 0 ] || die "building the chroot needs root"
  mkdir -p "$DIR"
  exec 9>"$root.lock"
  flock 9
  if current "$suite"; then exec 9>&-; echo "$root"; return; fi  # built while we waited

  if ! command -v debootstrap >/dev/null; then
    echo "slurm-chroot: installing debootstrap on the host" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends debootstrap >/dev/null \
      || die "could not install debootstrap"
  fi

  local mirror new=$root.new log=$root.build.log t0=$SECONDS version
  mirror=$(mirror)
  rm -rf --one-file-system "$new"
  : >"$log"
  echo "slurm-chroot: debootstrap $suite from $mirror into $new (log: $log)" >&2
  debootstrap --variant=minbase "$suite" "$new" "$mirror" >>"$log" 2>&1 \
    || die "debootstrap failed, see $log"
  # No maintainer script may start a service inside the chroot.
  printf '#!/bin/sh\nexit 101\n' >"$new/usr/sbin/policy-rc.d"
  chmod 755 "$new/usr/sbin/policy-rc.d"
  # minbase has no /etc/hosts; the dev cluster binds its own over this one at run time.
  printf '127.0.0.1 localhost\n' >"$new/etc/hosts"
  echo "slurm-chroot: apt-get install $PACKAGES (in the $suite chroot)" >&2
  # shellcheck disable=SC2016  # expanded by the inner shell
  unshare --mount --propagation private -- sh -euc '
    r=$1; shift
    mount -t proc proc "$r/proc"
    mount -t sysfs sysfs "$r/sys"
    mount --bind /dev "$r/dev"
    mount --bind /dev/pts "$r/dev/pts"
    mount -t tmpfs -o mode=0755 tmpfs "$r/run"
    apt="apt-get -o Acquire::Check-Valid-Until=false"
    chroot "$r" $apt update -q
    chroot "$r" env DEBIAN_FRONTEND=noninteractive $apt install -y -q --no-install-recommends "$@"
    chroot "$r" apt-get clean
  ' chroot "$new" $PACKAGES >>"$log" 2>&1 || die "apt-get in the $suite chroot failed, see $log"
  version=$(chroot "$new" /usr/sbin/slurmctld -V 2>&1) \
    || die "slurmctld -V failed in the $suite chroot"
  # The marker by which the dev cluster's client wrappers know they already run inside it.
  echo "$want" >"$new/etc/airlock-chroot"

  if [ -e "$root" ]; then  # a stale build: clusters still running on it keep their open files
    mv "$root" "$root.old.$$"
    rm -rf --one-file-system "$root.old.$$"
  fi
  mv "$new" "$root"
  echo "$want" >"$root.stamp"
  exec 9>&-
  echo "slurm-chroot: built $root ($version) in $((SECONDS - t0)) s" >&2
  echo "$root"
}

for s in "${suites[@]}"; do build "$s"; done
