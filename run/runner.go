package run

import (
	"context"

	"github.com/jaild/jaild/jail"
)

// Runner runs one spec in a fresh sandbox and tears it down. *jail.Manager
// implements it; front-end tests use a fake.
type Runner interface {
	Run(ctx context.Context, spec *jail.Spec) (*jail.Result, error)
}
