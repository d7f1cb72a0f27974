package policy

import (
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
)

// The decision cache. A policy set without nondeterministic builtins
// (time.now_ns, http.send, rand.intn...; OPA marks them) and without
// external data is a function of its input: the same completed input,
// path and hash included, gets the same answer. Agents repeat commands, so
// each set keeps its answers to recent inputs; a reload makes a new set
// and so drops them. Only allow and deny are kept, never an evaluation
// error (which may be a cancellation).
//
// A hit costs hashing and comparing the input, a small part of an
// evaluation (BenchmarkDecide's -new and -repeat cases measure both). The
// decision log and metrics see every decision, cached or not
// (Decision.Cached says which).

// maxDecisions and maxCachedInput bound the cache's memory: inputs larger
// than maxCachedInput bytes of strings (long shell scripts, big env) are
// evaluated every time.
const (
	maxDecisions   = 2048
	maxCachedInput = 4 << 10
)

type decisionCache struct {
	mu sync.Mutex
	m  map[int][]cachedDecision // by the input's hash
	n  int
}

type cachedDecision struct {
	input ast.Value
	a     answer // its reasons are shared: never modified
}

func (c *decisionCache) get(v ast.Value, h int) (answer, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range c.m[h] {
		if d.input.Compare(v) == 0 {
			return d.a, true
		}
	}
	return answer{}, false
}

func (c *decisionCache) put(v ast.Value, h int, a answer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || c.n >= maxDecisions {
		c.m, c.n = make(map[int][]cachedDecision), 0
	}
	c.m[h] = append(c.m[h], cachedDecision{input: v, a: a})
	c.n++
}

// nondeterministic returns the first builtin the modules call whose result
// can differ between two evaluations of the same input, or "" if none.
// The modules are as parsed (and rewritten): calls nested in terms are
// still terms, so both expressions and terms are walked.
func nondeterministic(mods map[string]*ast.Module) string {
	found := ""
	check := func(op ast.Ref) {
		if found != "" {
			return
		}
		if b, ok := ast.BuiltinMap[op.String()]; ok && b.Nondeterministic {
			found = b.Name
		}
	}
	for _, m := range mods {
		ast.WalkExprs(m, func(e *ast.Expr) bool {
			if e.IsCall() {
				check(e.Operator())
			}
			return found != ""
		})
		ast.WalkTerms(m, func(t *ast.Term) bool {
			if call, ok := t.Value.(ast.Call); ok && len(call) > 0 {
				if op, ok := call[0].Value.(ast.Ref); ok {
					check(op)
				}
			}
			return found != ""
		})
	}
	return found
}

// size is roughly how many bytes of strings in holds, to keep big inputs
// out of the cache.
func (in *Input) size() int {
	n := len(in.Command) + len(in.Path) + len(in.Cwd) + len(in.Caller) + len(in.FrontEnd) + len(in.SessionID)
	for _, a := range in.Args {
		n += len(a)
	}
	for k, v := range in.Env {
		n += len(k) + len(v)
	}
	if in.Shell != nil {
		n += len(in.Shell.Source) + 100*len(in.Shell.Commands) // and their paths and hashes
	}
	return n
}
