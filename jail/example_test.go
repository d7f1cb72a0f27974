package jail_test

import (
	"context"
	"fmt"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
)

// One command in a fresh sandbox, torn down when Run returns. (Needs root;
// the tests run it for real in jail_test.go.)
func ExampleManager_Run() {
	m, err := jail.New(jail.Config{})
	if err != nil {
		panic(err)
	}
	defer m.Close()
	res, err := m.Run(context.Background(), &jail.Spec{
		Limits:  box.Limits{Memory: 64 << 20, Pids: 32},
		Command: box.Command{Args: []string{"sh", "-c", "echo hi; exit 3"}},
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%q %d oom=%v\n", res.Stdout, res.ExitCode, res.OOMKilled)
}
