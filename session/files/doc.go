// Package files reads and writes the files of a session's workspace for
// the daemon, which runs as root, and serves them over HTTP ([Handler]).
//
// Everything in a workspace was written by sandboxed code, which may have
// left symlinks to /etc, fifos, sockets, device nodes (the tmpfs is nodev,
// but a check must not depend on that) or hard links anywhere in it, and
// may keep changing them while a request runs. The rules:
//
//   - Nothing is looked up by joining path strings. The workspace root is
//     opened once per request ([Open]) and every path a caller gives is
//     resolved from that descriptor with openat2 and RESOLVE_IN_ROOT |
//     RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV: the kernel treats the root
//     as "/" for the lookup, so ".." stops at it and an absolute symlink
//     target starts from it, atomically, whatever is renamed meanwhile.
//     A caller's own path may not contain "..": it has no use for one.
//   - Symlinks are followed as if the workspace were the whole
//     filesystem: a relative link that stays in /work reads as the
//     sandbox reads it; a link to /etc/passwd reads <workspace>/etc/passwd
//     (usually: not found), never the host's file nor the sandbox's. Note
//     that an absolute link written in the sandbox as /work/a therefore
//     resolves to <workspace>/work/a, not to <workspace>/a: relative
//     links are the ones that read the same on both sides.
//   - A file is read only once it is known to be a regular file: it is
//     opened with O_PATH (which opens nothing: no fifo blocks, no driver
//     is called), checked with fstat, then reopened through
//     /proc/self/fd, which opens that very inode. A fifo, socket or
//     device is ErrNotRegular. A directory listing reads names with
//     getdents and lstat-s each entry relative to the directory's
//     descriptor; symlinks are listed with their target, not followed.
//   - A write goes to a new file (O_CREAT|O_EXCL, an unguessable name) in
//     the target's directory, owned by the workspace's ids (fchown on the
//     descriptor), then renamed over the target: a symlink at the target
//     is replaced, never written through; a hard link to the old file
//     keeps the old content. Missing parents are made one level at a time,
//     each looked up again from the root.
//   - Removal never follows a symlink: the entry is lstat-ed relative to
//     its parent's descriptor; a directory is opened with O_NOFOLLOW and
//     emptied through its own descriptor, level by level (unlinkat).
//   - A tar out ([WriteTar]) walks the same way, storing symlinks as
//     symlinks and skipping fifos, sockets and devices. A tar in
//     ([FS.Untar]) resolves each entry's parents below the target with
//     RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, so an entry through a symlink,
//     made by the archive itself or already there, is refused; ".." in
//     names is refused, a leading "/" dropped; hard links may only name a
//     file unpacked from the same archive; devices and fifos are refused.
//   - Hard links in a workspace can only join files of the same tmpfs:
//     link(2) fails with EXDEV across filesystems, so a sandbox cannot
//     make one to a host file, and none of the above ever writes through
//     one (writes replace, they do not modify in place).
//
// The bytes of a write are written by a helper process (see [Charger]) when
// the FS has one: tmpfs pages are charged to the memory cgroup of their
// writer, and the daemon's must not hold the sessions' files.
//
// A download may not produce more than the workspace holds (ErrSparse): a
// sparse file's holes would be sent as zeros, and archive/tar writes no
// sparse entries.
//
// The kernel enforces the workspace's quota: a write past it fails with
// ENOSPC, which is ErrNoSpace (HTTP 507), and the partial file is removed.
package files
