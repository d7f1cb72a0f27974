// poolwait: the init of a pooled sandbox (see jail/pool.go). libcontainer
// starts it as the container's pid 1, "/proc/self/exe pool-wait", with the
// sandbox fully built (namespaces, mounts, cgroup, no capabilities,
// no_new_privs, the sandbox user) and its seccomp filter loaded, by
// libcontainer or, as "pool-wait seccomp", here first (see below). It
// blocks reading its command from fd 3, which the pool writes and ends
// (EOF) at request time, then execs the command directly: the command is
// pid 1, nothing of this program is left. jail gives fd 3 and fd 4 as one
// end of a socket pair (see jail/pool.go).
//
// It runs as a C constructor, before the Go runtime starts, so that a
// pooled sandbox's wait costs no more than a shell's (less: no parsing, no
// second exec through env). The message is NUL-terminated strings:
//
//   PATH, DIR, FILES (0 or 1), ARGC (decimal), ARGV[0..ARGC-1], then the
//   environment to its end
//
// FILES 1 makes the pipe the sandbox was started with at fd 5 (a
// workspace's prestarted sandbox has one, see jail/workspacewarm.go) the
// command's fd 3; with 0 it is closed, and the command gets no fd 3, as in a
// fresh sandbox.
//
// Started as "<binary> pool-wait seccomp", it first loads the sandbox's
// seccomp filter, which fd 3 carries ahead of the message (see
// jail/seccompprobe.go): two native-endian uint32, the filter flags and
// the instruction count, then the instructions as struct sock_filter. It
// loads it before it reads its command, and goes no further without it: a
// short read, a count out of range, an unknown flag or a refused load ends
// it with a report on fd 4 ("error <errno>"). libcontainer has set
// no_new_privs.
//
// PATH is where a command name without a slash is looked for, as a fresh
// sandbox's init does (a regular, executable file). A command that cannot
// run is reported on fd 4 as "notfound" or "notexec" (exit 127 or 126),
// "nodir" (the working directory, exit 127) or "error <errno>"; fd 4 is
// close-on-exec, so the command never holds it and cannot forge a report.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

// glibc calls constructors with (argc, argv, envp); other C libraries may
// not, and reading argv from garbage would break every start of jaild.
#ifndef __GLIBC__
#error "poolwait.c needs glibc, which passes argc and argv to constructors"
#endif

#define MSG_FD 3
#define STATUS_FD 4
#define EXTRA_FD 5
#define MAX_MSG (64 << 20)

static void report(const char *what, int code)
{
	char buf[64];
	int n = snprintf(buf, sizeof buf, "%s\n", what);
	if (write(STATUS_FD, buf, n) < 0) {
		// Nothing else to tell it with.
	}
	_exit(code);
}

static void report_errno(int err)
{
	char buf[32];
	snprintf(buf, sizeof buf, "error %d", err);
	report(buf, 127);
}

// runnable: a regular file this process may execute.
static int runnable(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

// lookup finds name in path, as a fresh sandbox's init does; the result is
// in buf, or NULL.
static const char *lookup(const char *name, const char *path, char *buf, size_t size)
{
	const char *p = path;
	for (;;) {
		const char *end = strchr(p, ':');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		int n = len == 0 ? snprintf(buf, size, "./%s", name)
				 : snprintf(buf, size, "%.*s/%s", (int)len, p, name);
		if (n > 0 && (size_t)n < size && runnable(buf))
			return buf;
		if (!end)
			return NULL;
		p = end + 1;
	}
}

// read_full reads exactly size bytes from fd, or reports why not.
static void read_full(int fd, void *buf, size_t size)
{
	char *p = buf;
	while (size > 0) {
		ssize_t n = read(fd, p, size);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			report_errno(errno);
		if (n == 0)
			report_errno(EPROTO);
		p += n;
		size -= n;
	}
}

// load_filter loads the filter fd 3 starts with (see the top).
static void load_filter(void)
{
	uint32_t hdr[2];
	read_full(MSG_FD, hdr, sizeof hdr);
	uint32_t flags = hdr[0], count = hdr[1];
	if (count == 0 || count > BPF_MAXINSNS)
		report_errno(EINVAL);
	if (flags & ~(uint32_t)(SECCOMP_FILTER_FLAG_LOG | SECCOMP_FILTER_FLAG_SPEC_ALLOW))
		report_errno(EINVAL);
	struct sock_filter *insns = calloc(count, sizeof *insns);
	if (!insns)
		report_errno(ENOMEM);
	read_full(MSG_FD, insns, count * sizeof *insns);
	struct sock_fprog prog = { .len = (unsigned short)count, .filter = insns };
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog) < 0)
		report_errno(errno);
	free(insns);
}

static void poolwait(void)
{
	size_t cap = 4096, len = 0;
	char *msg = malloc(cap);
	if (!msg)
		report_errno(ENOMEM);
	for (;;) {
		if (len == cap) {
			if (cap >= MAX_MSG)
				report_errno(E2BIG);
			cap *= 2;
			msg = realloc(msg, cap);
			if (!msg)
				report_errno(ENOMEM);
		}
		ssize_t n = read(MSG_FD, msg + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			report_errno(errno);
		if (n == 0)
			break;
		len += n;
	}
	close(MSG_FD);
	if (fcntl(STATUS_FD, F_SETFD, FD_CLOEXEC) < 0)
		_exit(127);
	// Split into strings; a message cut short is refused.
	if (len == 0 || msg[len - 1] != '\0')
		report_errno(EINVAL);
	size_t count = 0;
	for (size_t i = 0; i < len; i++)
		count += msg[i] == '\0';
	char **strs = calloc(count + 1, sizeof(char *));
	if (!strs)
		report_errno(ENOMEM);
	for (size_t i = 0, k = 0; i < len; k++) {
		strs[k] = msg + i;
		i += strlen(msg + i) + 1;
	}
	if (count < 5)
		report_errno(EINVAL);
	const char *path = strs[0], *dir = strs[1];
	if (strcmp(strs[2], "0") != 0 && strcmp(strs[2], "1") != 0)
		report_errno(EINVAL);
	int files = strs[2][0] == '1';
	char *end;
	long argc = strtol(strs[3], &end, 10);
	if (*end != '\0' || argc < 1 || (size_t)argc > count - 4)
		report_errno(EINVAL);
	char **argv = calloc(argc + 1, sizeof(char *));
	if (!argv)
		report_errno(ENOMEM);
	memcpy(argv, strs + 4, argc * sizeof(char *));
	char **envp = strs + 4 + argc; // to the NULL calloc left at the end
	// dup2 leaves the copy without close-on-exec: the command keeps it.
	if (files && dup2(EXTRA_FD, MSG_FD) < 0)
		report_errno(errno);
	close(EXTRA_FD); // EBADF in a sandbox started without one

	if (chdir(dir) < 0)
		report("nodir", 127);
	const char *name = argv[0];
	char found[PATH_MAX];
	if (strchr(name, '/')) {
		if (access(name, F_OK) < 0)
			report("notfound", 127);
		if (!runnable(name))
			report("notexec", 126);
	} else if (!(name = lookup(name, path, found, sizeof found))) {
		report("notfound", 127);
	}
	execve(name, argv, envp);
	switch (errno) {
	case ENOENT:
		report("notfound", 127);
	case EACCES:
	case ENOEXEC:
	case EISDIR:
	case EPERM:
		report("notexec", 126);
	}
	report_errno(errno);
}

// Called with the process's arguments by glibc, before the Go runtime
// starts. Anything but "<binary> pool-wait" as pid 1 goes on to Go.
__attribute__((constructor)) static void poolwait_init(int argc, char **argv, char **envp)
{
	(void)envp;
	if (argc < 2 || strcmp(argv[1], "pool-wait") != 0)
		return;
	if (getpid() != 1 || argc > 3 || (argc == 3 && strcmp(argv[2], "seccomp") != 0)) {
		fprintf(stderr, "pool-wait is the init of a pooled jaild sandbox, started by jaild itself\n");
		_exit(2);
	}
	if (argc == 3)
		load_filter();
	poolwait();
}
