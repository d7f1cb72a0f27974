package run_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/run"
)

// echoJail stands in for *jail.Manager: it reports the limits it was given.
type echoJail struct{}

func (echoJail) Run(_ context.Context, s *jail.Spec) (*box.Result, error) {
	return &box.Result{Stdout: fmt.Sprintf("memory=%d timeout=%v", s.Limits.Memory, s.Timeout)}, nil
}

// A chain fills in what a request left unset, within the operator's maxima,
// and refuses what it asks for above them.
func ExampleChain() {
	r, err := run.Chain(echoJail{}, run.ChainOptions{
		Max: run.Maxima{Limits: box.Limits{Memory: 128 << 20}, Timeout: time.Minute},
	})
	if err != nil {
		panic(err)
	}
	res, _ := r.Run(context.Background(), run.Request{Spec: &jail.Spec{Command: box.Command{Args: []string{"true"}}}})
	fmt.Println(res.Stdout)

	_, err = r.Run(context.Background(), run.Request{Spec: &jail.Spec{Limits: box.Limits{Memory: 1 << 30}, Command: box.Command{Args: []string{"true"}}}})
	fmt.Println(err)
	// Output:
	// memory=134217728 timeout=10s
	// invalid memory_bytes: 1073741824 bytes exceeds the maximum of 134217728
}
