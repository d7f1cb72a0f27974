package server

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/session"
)

// TestMCPTaskTexts: what a model reads of a task names it by its
// description, says how to follow it, and calls a killed task killed.
func TestMCPTaskTexts(t *testing.T) {
	s := newSessionServer(t)
	cs, _ := s.connect(t)
	res, out := call(t, cs, "bash", map[string]any{"command": "block", "description": "serve the docs", "run_in_background": true})
	if res.IsError || out.TaskID == "" {
		t.Fatalf("background bash: %s", text(res))
	}
	if want := `task_output {"task_id":"` + out.TaskID + `"}`; !strings.Contains(text(res), want) {
		t.Errorf("start text %q does not say %s", text(res), want)
	}
	task := taskCall(t, cs, "task_output", map[string]any{"task_id": out.TaskID, "block": false})
	if task.Description != "serve the docs" {
		t.Errorf("task_output description %q", task.Description)
	}
	lres, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "list_tasks", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	var list TaskList
	structured(t, lres, &list)
	if len(list.Tasks) != 1 || list.Tasks[0].Description != "serve the docs" || !strings.Contains(text(lres), "serve the docs") {
		t.Errorf("list_tasks: %+v %q", list, text(lres))
	}
	kres, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "kill_task", Arguments: map[string]any{"task_id": out.TaskID}})
	if err != nil {
		t.Fatal(err)
	}
	structured(t, kres, &task)
	if task.Error != "killed" || !strings.Contains(text(kres), "(killed)") || strings.Contains(text(kres), "context canceled") {
		t.Errorf("kill_task: error %q, text %q", task.Error, text(kres))
	}
}

// TestMCPInstructionsNameTheToolsServed: the initialize instructions name
// the tools that tools/list lists, no others, and count in words.
func TestMCPInstructionsNameTheToolsServed(t *testing.T) {
	m, err := session.New(&fakeJail{open: map[string]bool{}, tmpDir: t.TempDir}, session.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	all := []string{"bash", "execute", "run_network_tool", "task_output", "kill_task", "list_tasks"}
	for _, tt := range []struct {
		name string
		opts MCPOptions
		want []string
	}{
		{"default", MCPOptions{}, []string{"bash", "execute"}},
		{"bash only", MCPOptions{Tools: []string{"bash"}}, []string{"bash"}},
		{"network tool", MCPOptions{Tools: []string{"run_network_tool"}}, []string{"run_network_tool"}},
		{"sessions", MCPOptions{Sessions: &run.Sessions{Manager: m}}, []string{"bash", "execute", "task_output", "kill_task", "list_tasks"}},
		{"sessions without bash", MCPOptions{Sessions: &run.Sessions{Manager: m}, Tools: []string{"execute"}}, []string{"execute"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cs := connect(t, &FakeBase{}, tt.opts, nil)
			instr := cs.InitializeResult().Instructions
			tools, err := cs.ListTools(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var listed []string
			for _, tool := range tools.Tools {
				listed = append(listed, tool.Name)
			}
			slices.Sort(listed)
			want := slices.Sorted(slices.Values(tt.want))
			if !slices.Equal(listed, want) {
				t.Errorf("tools/list %v, want %v", listed, want)
			}
			for _, name := range all {
				if got := strings.Contains(instr, "`"+name+"`"); got != slices.Contains(tt.want, name) {
					t.Errorf("instructions name %s: %v, want %v:\n%s", name, got, !got, instr)
				}
			}
			if !strings.Contains(instr, " 1 CPU.") || strings.Contains(instr, "1 CPUs") {
				t.Errorf("instructions do not say \"1 CPU\":\n%s", instr)
			}
		})
	}
}
