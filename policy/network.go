package policy

import (
	"context"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

// NetworkQuery is the decision asked about every connection a sandbox
// given egress opens through jaild's proxy, once the allowlists let it
// through. Undefined is a deny: with a policy loaded, the operator lets
// connections out by writing package sandbox.network; a set that does not
// mention it lets none out.
const NetworkQuery = "data.sandbox.network.allow"

// NetworkInput is input of NetworkQuery: one connection.
type NetworkInput struct {
	Host      string `json:"host"`
	Port      int    `json:"port"`
	Caller    string `json:"caller"`
	Command   string `json:"command"`
	SessionID string `json:"session_id"`
	RequestID string `json:"request_id"`
	FrontEnd  string `json:"front_end"`
}

func (in *NetworkInput) value() map[string]any {
	return map[string]any{
		"host": in.Host, "port": in.Port, "caller": in.Caller, "command": in.Command,
		"session_id": in.SessionID, "request_id": in.RequestID, "front_end": in.FrontEnd,
	}
}

// prepareNetwork prepares NetworkQuery on a compiled set.
func prepareNetwork(ctx context.Context, c *ast.Compiler) (rego.PreparedEvalQuery, error) {
	q, err := rego.New(rego.Query(NetworkQuery), rego.Compiler(c)).PrepareForEval(ctx)
	if err != nil {
		return q, fmt.Errorf("prepare %s: %s", NetworkQuery, unrewrite(err.Error()))
	}
	return q, nil
}

// AllowNetwork decides one connection. It fails closed: deny-all, an
// evaluation error or anything but a single true is a deny (an error
// says why); in shadow mode a deny is only reported, with allowed true.
func (e *Engine) AllowNetwork(ctx context.Context, in NetworkInput) (bool, error) {
	st := e.cur.Load()
	if st.err != nil {
		return false, fmt.Errorf("policy deny-all is active: %w", st.err)
	}
	rs, err := eval(ctx, st.set.network, mustValue(in.value()))
	if err != nil {
		return false, fmt.Errorf("policy evaluation of %s failed: %s", NetworkQuery, unrewrite(err.Error()))
	}
	ok := rs.Allowed()
	if !ok && e.opts.Mode == Shadow {
		e.log.Info("policy (shadow) would deny a connection", "host", in.Host, "port", in.Port, "caller", in.Caller)
		return true, nil
	}
	return ok, nil
}

func mustValue(v map[string]any) ast.Value {
	val, err := ast.InterfaceToValue(v)
	if err != nil {
		panic(err) // strings and ints only
	}
	return val
}
