package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// runExec is -exec: each of c workers runs args in a loop, as a shell loop
// would but without a shell's fork per iteration or a timestamp process, so
// that one-shot sandboxes (jaild run, runc run, bwrap, unshare) are measured
// the same way as the daemon's requests. "{w}" in an argument is replaced by
// the worker's index and "{n}" by the run's number (runc needs a container
// id of its own per run). A run counts as
// an error unless it exits 0; its stdin is /dev/null and its output is
// discarded, its first 200 bytes kept for the first error.
func runExec(args []string, levelList string, n int, maxTime, pause time.Duration, warmup int) error {
	if len(args) == 0 {
		return errors.New("-exec: no command after --")
	}
	if n <= 0 || n > 100000 || maxTime <= 0 || maxTime > 10*time.Minute || warmup < 0 || warmup > 1000 {
		return errors.New("-n must be 1..100000, -duration 0..10m, -warmup 0..1000")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var runs atomic.Int64
	for _, s := range strings.Split(levelList, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || c <= 0 || c > 256 {
			return fmt.Errorf("-c %q: want concurrency levels between 1 and 256", levelList)
		}
		// A run in progress when the level's time is up finishes (a
		// sandbox killed half-built leaves work behind it, which would
		// load the next level); it is not a sample. Only a signal, or a
		// run a minute past the level's end, kills it.
		hard, cancel := context.WithTimeout(ctx, maxTime+time.Minute)
		do := func(_ context.Context, w int) error {
			n := runs.Add(1)
			argv := make([]string, len(args))
			for i, a := range args {
				a = strings.ReplaceAll(a, "{w}", strconv.Itoa(w))
				argv[i] = strings.ReplaceAll(a, "{n}", strconv.FormatInt(n, 10))
			}
			cmd := exec.CommandContext(hard, argv[0], argv[1:]...)
			var out tail
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("%w: %s", err, out.b)
			}
			return nil
		}
		for range warmup {
			if err := do(ctx, 0); err != nil {
				cancel()
				return fmt.Errorf("warm-up run: %w", err)
			}
		}
		report(level(ctx, do, c, n, maxTime, pause))
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// tail keeps the first 200 bytes written to it.
type tail struct{ b []byte }

func (t *tail) Write(p []byte) (int, error) {
	if room := 200 - len(t.b); room > 0 {
		t.b = append(t.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}
