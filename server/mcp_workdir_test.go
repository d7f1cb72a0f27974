package server

import (
	"context"
	"regexp"
	"strings"
	"testing"
)

// TestMCPWorkDir: with MCPOptions.WorkDir the instructions, the tools'
// descriptions and their argument descriptions name it, never /work.
func TestMCPWorkDir(t *testing.T) {
	notWork := regexp.MustCompile(`/work\b`)
	cs := connect(t, &FakeBase{}, MCPOptions{WorkDir: "/workspace", Tools: []string{ToolBash, ToolExecute, ToolRunNetworkTool}}, nil)
	check := func(what, s string) {
		t.Helper()
		if notWork.MatchString(s) {
			t.Errorf("%s names /work: %q", what, s)
		}
	}
	instr := cs.InitializeResult().Instructions
	if !strings.Contains(instr, "writable /workspace (the default working directory and HOME)") {
		t.Errorf("instructions do not name /workspace: %q", instr)
	}
	check("instructions", instr)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		check(tool.Name, tool.Description)
		for name, p := range schemaOf(t, tool.InputSchema).Properties {
			check(tool.Name+"."+name, p.Description)
		}
	}
	var bash string
	for _, tool := range res.Tools {
		if tool.Name == ToolBash {
			bash = schemaOf(t, tool.InputSchema).Properties["env"].Description
		}
	}
	if !strings.Contains(bash, "HOME=/workspace") {
		t.Errorf("bash env description: %q", bash)
	}
}
