// Package rootfs provides the read-only root file system of a sandbox and
// the mounts that go with it.
//
// The default root, [Host], is a small template directory that jaild
// generates once under its state dir: empty mount points, the merged-/usr
// symlinks (bin -> usr/bin, ...) as the host has them, and a minimal /etc
// holding only generated files (passwd and group with the sandbox user,
// hosts, nsswitch.conf). Inside each sandbox the host's /usr is bind-mounted
// read-only over the template's, with /etc/alternatives and /etc/ld.so.cache
// (symlinks and a library index, nothing secret); nothing else of the host
// is visible: not /root, /home, /var, /etc/shadow or the host's /etc at
// large. Every bind is made in the sandbox's own mount namespace, so the host
// mount table never changes. A template found from an earlier start is used
// only if it is still as jaild generated it (all root's, same modes, no
// added entries).
//
// A prepared directory ([Open]) replaces the template; scripts/mkrootfs.sh
// builds one from busybox. It must already hold the mount points /proc,
// /dev, /tmp and the working directory (/work unless the operator chose
// another), since the sandbox cannot create them in a read-only root.
//
// The working directory is the sandbox's writable tmpfs (or a session's
// workspace) and its user's home. The template makes it, and any parent
// directories it needs, as empty mount points, and names it in passwd: a
// template is content-addressed, so each working directory has its own.
package rootfs
