package server

import (
	"context"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
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
