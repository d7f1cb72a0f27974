// The store's thread (see doc.go). It serves one message at a time on its
// end of a SOCK_SEQPACKET pair:
//
//   'P' with up to MAX_PUT descriptors  -> 'p' + their int32 numbers here,
//                                          or 'E' + an int32 errno
//   'C' + int32 numbers                 -> 'c' once they are closed
//   'Q'                                 -> 'q' once all is closed; the thread ends
//
// Its first message, unasked, is its tid (int32), or a negative errno if
// it could not make its table its own.
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fdstore.h"

static int close_range_(unsigned lo, unsigned hi)
{
	if (lo > hi)
		return 0;
	return syscall(SYS_close_range, lo, hi, 0);
}

// close_all_but closes every descriptor of the thread's table but keep.
static int close_all_but(int keep)
{
	if (keep > 0 && close_range_(0, keep - 1) < 0)
		return -1;
	return close_range_(keep + 1, UINT_MAX);
}

static void reply(int sock, char op, const int32_t *nums, size_t n)
{
	char buf[1 + sizeof(int32_t) * FDSTORE_MAX_CLOSE];
	buf[0] = op;
	memcpy(buf + 1, nums, n * sizeof(int32_t));
	while (send(sock, buf, 1 + n * sizeof(int32_t), MSG_NOSIGNAL) < 0 && errno == EINTR)
		;
}

static void reply_errno(int sock, int err)
{
	int32_t e = err;
	reply(sock, 'E', &e, 1);
}

// put receives the descriptors of the message m and answers with their
// numbers. A message cut short leaves nothing behind.
static void put(int sock, struct msghdr *m, ssize_t n)
{
	int32_t got[FDSTORE_MAX_PUT];
	size_t k = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c != NULL; c = CMSG_NXTHDR(m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t cnt = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		int *fds = (int *)CMSG_DATA(c);
		for (size_t i = 0; i < cnt; i++) {
			if (k < FDSTORE_MAX_PUT)
				got[k++] = fds[i];
			else
				close(fds[i]);
		}
	}
	if (n != 1 || (m->msg_flags & MSG_CTRUNC) || k == 0) {
		for (size_t i = 0; i < k; i++)
			close(got[i]);
		// Cut short: the table is full (EMFILE) or too many were sent.
		reply_errno(sock, (m->msg_flags & MSG_CTRUNC) ? EMFILE : EINVAL);
		return;
	}
	reply(sock, 'p', got, k);
}

// drop_rights closes descriptors that came with a message that does not
// put any.
static void drop_rights(struct msghdr *m)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c != NULL; c = CMSG_NXTHDR(m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int *fds = (int *)CMSG_DATA(c);
		for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++)
			close(fds[i]);
	}
}

static void *serve(void *arg)
{
	int sock = (int)(intptr_t)arg;
	int32_t hello = (int32_t)syscall(SYS_gettid);
	// The table is shared with the process until here: report a failure
	// without touching it.
	if (unshare(CLONE_FILES) < 0) {
		hello = -errno;
		send(sock, &hello, sizeof(hello), MSG_NOSIGNAL);
		return NULL;
	}
	// A copy of the process's table: close all of it but the socket, so
	// that no file another thread closes stays open here (a pipe would
	// never see its EOF).
	if (close_all_but(sock) < 0) {
		hello = -errno;
		send(sock, &hello, sizeof(hello), MSG_NOSIGNAL);
		return NULL; // the thread's exit closes its table
	}
	send(sock, &hello, sizeof(hello), MSG_NOSIGNAL);

	for (;;) {
		char data[1 + sizeof(int32_t) * FDSTORE_MAX_CLOSE];
		union {
			char buf[CMSG_SPACE(sizeof(int) * FDSTORE_MAX_PUT)];
			struct cmsghdr align;
		} ctl;
		struct iovec iov = {.iov_base = data, .iov_len = sizeof(data)};
		struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf)};
		ssize_t n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break; // the process's end is closed
		if (data[0] != 'P')
			drop_rights(&m);
		switch (data[0]) {
		case 'P':
			put(sock, &m, n);
			break;
		case 'C': {
			size_t cnt = (size_t)(n - 1) / sizeof(int32_t);
			for (size_t i = 0; i < cnt; i++) {
				int32_t fd;
				memcpy(&fd, data + 1 + i * sizeof(int32_t), sizeof(fd));
				if (fd >= 0 && fd != sock)
					close(fd);
			}
			reply(sock, 'c', NULL, 0);
			break;
		}
		case 'Q':
			close_all_but(sock);
			reply(sock, 'q', NULL, 0);
			return NULL;
		default:
			reply_errno(sock, EINVAL);
		}
	}
	return NULL;
}

int jaild_fdstore_start(int sock)
{
	pthread_attr_t attr;
	pthread_t t;
	sigset_t all, old;
	int err = pthread_attr_init(&attr);
	if (err != 0)
		return err;
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	// The thread inherits this mask: it never takes a signal, which
	// would otherwise run Go's handler on a thread Go does not know.
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&t, &attr, serve, (void *)(intptr_t)sock);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	return err;
}
