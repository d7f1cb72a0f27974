package server

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/run"
)

// egressRecorder is a run.Runner that records what each request asked of
// egress.
type egressRecorder struct {
	mu   sync.Mutex
	asks []*api.Egress
}

func (r *egressRecorder) Run(_ context.Context, req run.Request) (*box.Result, error) {
	r.mu.Lock()
	r.asks = append(r.asks, req.Egress)
	r.mu.Unlock()
	return &box.Result{ID: "x", Egress: &box.EgressUsage{Connections: 2, Denied: 1}}, nil
}

func (*egressRecorder) Start(context.Context, run.Request) (string, error) { return "", ErrNoSessions }

// TestMCPEgress: the tools take an egress argument only when the operator
// lets calls ask for network, and pass it to the chain.
func TestMCPEgress(t *testing.T) {
	for _, allowed := range []bool{false, true} {
		t.Run(map[bool]string{false: "off", true: "on"}[allowed], func(t *testing.T) {
			rec := &egressRecorder{}
			st, ct := mcp.NewInMemoryTransports()
			ctx := context.Background()
			ss, err := NewMCPServer(rec, MCPOptions{Egress: allowed}).Connect(ctx, st, nil)
			if err != nil {
				t.Fatal(err)
			}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cs.Close(); ss.Wait() })
			tools, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, tool := range tools.Tools {
				schema, _ := tool.InputSchema.(map[string]any)
				props, _ := schema["properties"].(map[string]any)
				if _, ok := props["egress"]; ok != allowed {
					t.Errorf("%s schema has egress: %v, want %v", tool.Name, ok, allowed)
				}
				if allowed != strings.Contains(tool.Description, `"egress": true`) {
					t.Errorf("%s description and egress %v: %s", tool.Name, allowed, tool.Description)
				}
			}
			for _, tool := range []string{"bash", "execute"} {
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"command": "curl", "egress": true}})
				if err != nil {
					t.Fatal(err)
				}
				if res.IsError == allowed {
					t.Errorf("%s with egress: isError %v: %s", tool, res.IsError, text(res))
				}
			}
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "true"}})
			if err != nil || res.IsError {
				t.Fatalf("call without egress: %v %s", err, text(res))
			}
			want := 1
			if allowed {
				want = 3
			}
			if len(rec.asks) != want {
				t.Fatalf("%d runs, want %d", len(rec.asks), want)
			}
			for i, a := range rec.asks {
				asked := i < len(rec.asks)-1
				if (a != nil && a.Allowed) != asked {
					t.Errorf("run %d: egress %+v, want asked=%v", i, a, asked)
				}
			}
		})
	}
}
