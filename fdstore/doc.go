// Package fdstore keeps file descriptors out of the process's file table:
// in the table of one thread of its own, a C thread that unshared its
// table (CLONE_FILES) and runs no Go code.
//
// Every fork copies the forking thread's table and every exec closes the
// copies, so a process that forks and execs often (jaild's worker starts
// every sandbox's init that way) pays, at each start, for every descriptor
// it holds. A jaild session holds three for its whole life; at 2,000
// sessions that was 6,000 copies and closes per sandbox start
// (docs/performance.md). Kept in a Store, they are in no table a fork
// copies, and the process reaches each through its path,
// /proc/<pid>/task/<tid>/fd/<n> (Store.Path, Store.Open).
//
// Why a C thread: a Go thread that unshares its table still runs the Go
// runtime's code, and the runtime's poller descriptors (epoll, its wake-up
// eventfd) live in the process's table. A goroutine locked to such a
// thread that happens to start a garbage collection polls epoll there,
// finds the descriptor missing or another file in its place, and the
// runtime dies with "netpoll failed", its message written to whatever the
// thread's fd 2 is. A thread created with pthread_create that never calls
// into Go is outside the Go scheduler altogether. It blocks every signal,
// so none is delivered to it.
//
// The thread takes descriptors by SCM_RIGHTS over a socket pair, closes
// them on request, and ends, closing all it holds, when the Store is shut
// or the process dies. It needs close_range (Linux 5.9) to empty the copy
// of the process's table it starts with; Start fails where it is missing,
// and the caller keeps its descriptors in its own table.
package fdstore
