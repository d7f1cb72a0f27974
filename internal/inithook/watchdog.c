// watchdog: the dormant phase of a jail.Manager's watchdog (see
// jail/watchdog.go). A Manager starts "<binary> watchdog CONFIG" with the
// read end of a life pipe at fd 3 (only the owner holds its write end) and,
// on kernels that have them, the owner's pidfd at fd 4. Until the owner
// dies the watchdog has nothing to do but wait, so it waits here, before
// the Go runtime and the binary's package inits start: a one-shot
// "jaild run" then pays for a small C process beside its sandbox rather
// than a second Go program's start (about a fifth of the one-shot's CPU
// on this project's 2-core VM).
//
// Once either descriptor turns readable (the owner exited or is exiting),
// this returns and the process goes on into Go, where inithook's init
// calls jail.MaybeWatchdog, which waits for the exact condition it needs
// and cleans up. The signals the Go side ignores are ignored from the start, so that a
// terminal's Ctrl-C or a service manager's SIGTERM to jaild's processes does
// not end a dormant watchdog either; the owner ends it with SIGKILL.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>

#ifndef __GLIBC__
#error "watchdog.c needs glibc, which passes argc and argv to constructors"
#endif

#define LIFE_FD 3
#define PIDFD_FD 4

__attribute__((constructor)) static void watchdog_dormant(int argc, char **argv, char **envp)
{
	(void)envp;
	if (argc != 3 || strcmp(argv[1], "watchdog") != 0)
		return;
	signal(SIGINT, SIG_IGN);
	signal(SIGTERM, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	struct pollfd fds[2] = {{.fd = LIFE_FD, .events = POLLIN}, {.fd = PIDFD_FD, .events = POLLIN}};
	nfds_t n = fcntl(PIDFD_FD, F_GETFD) == -1 ? 1 : 2;
	// A descriptor that is not there (the Go side then reports the
	// broken start) reads as POLLNVAL: go on at once.
	while (poll(fds, n, -1) < 0 && errno == EINTR)
		;
}
