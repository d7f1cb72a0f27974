package egress

import "errors"

// Sentinels of the decisions a connection can be refused by; a *Denied
// wraps one of them with the host and the reason in words.
var (
	// ErrNotAllowed: the host and port match no pattern of the allowlist
	// (the operator's, the token's or the request's).
	ErrNotAllowed = errors.New("egress: not in the allowlist")
	// ErrPolicy: the Rego policy refused the connection, or failed.
	ErrPolicy = errors.New("egress: refused by the policy")
	// ErrAddress: the name resolved only to addresses that are always
	// refused (loopback, private, link-local, the host's own...).
	ErrAddress = errors.New("egress: refused address")
	// ErrResolve: the name could not be resolved.
	ErrResolve = errors.New("egress: name not resolved")
	// ErrCap: the run reached its connection or byte cap.
	ErrCap = errors.New("egress: cap reached")
	// ErrBadTarget: the request names no usable host and port.
	ErrBadTarget = errors.New("egress: bad target")
)

// Denied is a refused connection: what was asked and why it was refused.
type Denied struct {
	Host   string
	Port   int
	Reason string
	Err    error // one of the sentinels
}

func (d *Denied) Error() string {
	return "jaild egress: " + d.Reason
}

func (d *Denied) Unwrap() error { return d.Err }
