#!/usr/bin/env bash
# mkrootfs.sh: builds a small prepared root file system for
# `jaild run --rootfs DIR` (and `jaild serve --rootfs DIR`).
#
#   scripts/mkrootfs.sh [--debootstrap] [--suite bookworm] [--mirror URL] DIR
#
# Default: a busybox-static root (apt: busybox-static): /bin/busybox with
# every applet as a symlink beside it, /bin/sh among them, /etc/passwd and
# /etc/group with root and the sandbox user `sandbox` (uid/gid 1000), and the
# empty mount points the jail mounts over: /proc, /dev, /tmp, /work (plus
# /usr and /sys, unused by default, so that an operator's extra mounts need
# none made at run time). The jail mounts the root read-only and cannot
# create a directory in it, so every mount point must exist here.
#
# --debootstrap: a Debian minbase instead (apt: debootstrap; needs the
# mirror), with the same users and mount points added.
#
# Idempotent: run it again to refresh DIR. It refuses a non-empty DIR that it
# did not build (no etc/jaild-rootfs marker), so a typo cannot clobber a real
# directory. Needs root (files must be root-owned: the sandbox maps its own
# root to an unprivileged host uid and must not own its root file system).
set -euo pipefail

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "mkrootfs: $*" >&2; exit 1; }

MODE=busybox SUITE=bookworm MIRROR=
while [ $# -gt 0 ]; do
  case $1 in
    --debootstrap) MODE=debootstrap ;;
    --suite) SUITE=${2:?}; shift ;;
    --mirror) MIRROR=${2:?}; shift ;;
    -h | --help) usage ;;
    --) shift; break ;;
    -*) echo "mkrootfs: unknown flag $1" >&2; usage ;;
    *) break ;;
  esac
  shift
done
[ $# -eq 1 ] || usage
DIR=$1
[ "$(id -u)" -eq 0 ] || die "must run as root (the root file system must be root-owned)"

SANDBOX_UID=1000 SANDBOX_GID=1000
MARKER=etc/jaild-rootfs
# Mount points the jail needs (rootfs.MountPoints: proc dev tmp work) and
# ones an operator may add binds on.
MOUNTPOINTS=(proc dev tmp work usr sys)

mkdir -p "$DIR"
DIR=$(realpath "$DIR")
[ "$DIR" != / ] || die "refusing to build over /"
if [ -n "$(ls -A "$DIR")" ] && [ ! -f "$DIR/$MARKER" ]; then
  die "$DIR is not empty and was not built by mkrootfs.sh (no $MARKER); refusing to touch it"
fi
if [ -f "$DIR/$MARKER" ] && ! grep -qx "mode=$MODE" "$DIR/$MARKER"; then
  die "$DIR was built as $(grep '^mode=' "$DIR/$MARKER"); remove it to switch to $MODE"
fi

# put PATH MODE: writes stdin to DIR/PATH through a temp file and rename,
# so a reader never sees half a file and an unchanged file keeps its inode.
put() {
  local dst=$DIR/$1 tmp
  tmp=$(mktemp "$dst.XXXXXX")
  cat > "$tmp"
  chmod "$2" "$tmp"
  if cmp -s "$tmp" "$dst"; then rm -f "$tmp"; else mv -f "$tmp" "$dst"; fi
}

build_busybox() {
  local bb applet
  bb=$(command -v busybox || true)
  [ -n "$bb" ] || die "busybox not found (apt-get install busybox-static)"
  # The root has no /lib: a dynamically linked busybox would not start.
  if command -v file > /dev/null; then
    file -L "$bb" | grep -Eq 'statically linked|static-pie linked' ||
      die "$bb is not statically linked (apt-get install busybox-static)"
  elif ldd "$bb" > /dev/null 2>&1; then
    die "$bb is dynamically linked (apt-get install busybox-static)"
  fi
  # /bin is a real directory here, not merged-/usr's symlink: /usr stays an
  # empty mount point.
  for d in bin etc root; do
    [ -L "$DIR/$d" ] && rm -f "$DIR/$d"
    mkdir -p "$DIR/$d"
  done
  chmod 0755 "$DIR/bin" "$DIR/etc"
  chmod 0700 "$DIR/root"
  [ -L "$DIR/sbin" ] || { rmdir "$DIR/sbin" 2> /dev/null || true; ln -sfn bin "$DIR/sbin"; }
  if ! cmp -s "$bb" "$DIR/bin/busybox"; then
    install -m 0755 "$bb" "$DIR/bin/busybox.new"
    mv -f "$DIR/bin/busybox.new" "$DIR/bin/busybox"
  fi
  # Every applet busybox was built with, as a relative symlink in /bin.
  # --list is the build's own list; nothing is hard-coded here.
  "$DIR/bin/busybox" --list | while read -r applet; do
    case $applet in busybox | */*) continue ;; esac
    [ "$(readlink "$DIR/bin/$applet" 2> /dev/null)" = busybox ] || ln -sfn busybox "$DIR/bin/$applet"
  done
  [ -x "$DIR/bin/sh" ] || die "busybox has no sh applet"
}

build_debootstrap() {
  command -v debootstrap > /dev/null || die "debootstrap not found (apt-get install debootstrap)"
  if [ ! -f "$DIR/etc/debian_version" ]; then
    if [ -z "$MIRROR" ]; then
      # The host's own mirror, as apt is configured here.
      MIRROR=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2> /dev/null || true)
      MIRROR=${MIRROR:-http://deb.debian.org/debian}
    fi
    debootstrap --variant=minbase "$SUITE" "$DIR" "$MIRROR"
    rm -rf "$DIR"/var/cache/apt/archives/*.deb "$DIR"/var/lib/apt/lists/*
  fi
  # Nothing secret belongs in a sandbox root; minbase's are locked anyway.
  rm -f "$DIR/etc/shadow" "$DIR/etc/gshadow" "$DIR/etc/shadow-" "$DIR/etc/gshadow-"
}

case $MODE in
  busybox) build_busybox ;;
  debootstrap) build_debootstrap ;;
esac

for d in "${MOUNTPOINTS[@]}"; do
  # A symlink at a mount point would be followed by the mount: make it a dir.
  if [ -L "$DIR/$d" ]; then
    [ "$d" = usr ] && [ "$MODE" = debootstrap ] && continue
    rm -f "$DIR/$d"
  fi
  mkdir -p "$DIR/$d"
done
chmod 0555 "$DIR/proc" "$DIR/sys"
chmod 0755 "$DIR/dev" "$DIR/work" "$DIR/usr"
chmod 1777 "$DIR/tmp"

if [ "$MODE" = busybox ]; then
  put etc/passwd 0644 << EOF
root:x:0:0:root:/root:/bin/sh
sandbox:x:$SANDBOX_UID:$SANDBOX_GID:sandbox:/work:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
  put etc/group 0644 << EOF
root:x:0:
sandbox:x:$SANDBOX_GID:
nogroup:x:65534:
EOF
else
  # Keep Debian's system users; add or fix the sandbox user.
  sed -i '/^sandbox:/d' "$DIR/etc/passwd" "$DIR/etc/group"
  echo "sandbox:x:$SANDBOX_UID:$SANDBOX_GID:sandbox:/work:/bin/sh" >> "$DIR/etc/passwd"
  echo "sandbox:x:$SANDBOX_GID:" >> "$DIR/etc/group"
fi
put etc/hosts 0644 << 'EOF'
127.0.0.1	localhost jaild
::1	localhost ip6-localhost ip6-loopback
EOF
put etc/hostname 0644 <<< jaild
put etc/nsswitch.conf 0644 << 'EOF'
passwd: files
group: files
hosts: files
EOF
put etc/resolv.conf 0644 <<< '# no network in the sandbox'
ln -sfn ../proc/self/mounts "$DIR/etc/mtab"
chown -R --no-dereference root:root "$DIR/bin" "$DIR/etc" 2> /dev/null || true
chown root:root "$DIR"
chmod 0755 "$DIR"
put "$MARKER" 0644 << EOF
# Built by jaild's scripts/mkrootfs.sh; run it again to refresh this root.
mode=$MODE
EOF
echo "mkrootfs: $MODE root ready: $DIR (use: jaild run --rootfs $DIR -- sh -c 'echo hi')"
