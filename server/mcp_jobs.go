package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/caller"
	"github.com/jaild/jaild/session"
)

// The background task tools of an MCP session with a jaild session: bash
// with run_in_background starts a task (a job of the session);
// task_output, kill_task and list_tasks follow it.

// DefaultTaskWait is how long task_output blocks by default.
const DefaultTaskWait = 30 * time.Second

// TaskOutputInput is the argument of task_output.
type TaskOutputInput struct {
	TaskID  string `json:"task_id" jsonschema:"The id bash returned for a command run with run_in_background."`
	Block   *bool  `json:"block,omitempty" jsonschema:"Wait for the task to end first (default true), up to timeout."`
	Timeout int64  `json:"timeout,omitempty" jsonschema:"How long to wait, in milliseconds (default or 0: 30000; larger values than 600000 wait 600000)."`
}

// KillTaskInput is the argument of kill_task.
type KillTaskInput struct {
	TaskID string `json:"task_id" jsonschema:"The id of the task to kill."`
}

// ListTasksInput is the (empty) argument of list_tasks.
type ListTasksInput struct{}

// TaskOutput is a task's state and its output.
type TaskOutput struct {
	TaskID      string       `json:"task_id" jsonschema:"The task's id."`
	Command     []string     `json:"command" jsonschema:"What runs."`
	Description string       `json:"description,omitempty" jsonschema:"The description given to bash when the task was started."`
	State       string       `json:"state" jsonschema:"running or exited."`
	ExitCode    *int         `json:"exit_code,omitempty" jsonschema:"Once exited: the exit status, -1 if a signal killed it."`
	Stdout      string       `json:"stdout" jsonschema:"Standard output kept so far (head and tail, with a marker line between, beyond the limit)."`
	Stderr      string       `json:"stderr" jsonschema:"Standard error, kept like stdout."`
	Error       string       `json:"error,omitempty" jsonschema:"Why the task could not run or was cut short."`
	Verdict     *api.Verdict `json:"verdict,omitempty" jsonschema:"Once exited: how it ended."`
}

// TaskList is the result of list_tasks.
type TaskList struct {
	Tasks []TaskOutput `json:"tasks" jsonschema:"The tasks of this session, oldest first, without output."`
}

// addTaskTools registers the task tools.
func (t *mcpTools) addTaskTools(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{
		Name:        "task_output",
		Title:       "Read a background task's output",
		Description: "Return the output of a task started with bash run_in_background, and whether it has exited (with its exit code). By default waits for it to exit, up to timeout; block=false returns at once.",
		Annotations: readOnly(),
	}, t.taskOutput)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "kill_task",
		Title:       "Kill a background task",
		Description: "Kill a task started with bash run_in_background, and return its final output.",
		Annotations: toolAnnotations(false),
	}, t.killTask)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "list_tasks",
		Title:       "List background tasks",
		Description: "List the tasks started with bash run_in_background in this session, running and exited.",
		Annotations: readOnly(),
	}, t.listTasks)
}

// caller is who made the tool call req: the caller of the HTTP request that
// carried it (see mcpTools.post), else of ctx.
func (t *mcpTools) caller(ctx context.Context, req *mcp.CallToolRequest) caller.ID {
	if t.post != nil {
		if pctx, ok := t.post(req); ok {
			return CallerFromContext(pctx)
		}
	}
	return CallerFromContext(ctx)
}

func readOnly() *mcp.ToolAnnotations {
	a := toolAnnotations(false)
	a.ReadOnlyHint = true
	return a
}

func (t *mcpTools) taskOutput(ctx context.Context, req *mcp.CallToolRequest, in TaskOutputInput) (*mcp.CallToolResult, *TaskOutput, error) {
	sess, err := t.sess.lookup(req.Session, t.caller(ctx, req))
	if err != nil {
		return nil, nil, err
	}
	if in.Timeout < 0 {
		return nil, nil, fmt.Errorf("invalid arguments: timeout %d: must not be negative (0 means the default)", in.Timeout)
	}
	if in.Block == nil || *in.Block {
		wait := DefaultTaskWait
		if in.Timeout > 0 {
			wait = time.Duration(min(in.Timeout, MaxMCPTimeout.Milliseconds())) * time.Millisecond
		}
		wctx, cancel := context.WithTimeout(ctx, wait)
		err := sess.Wait(wctx, in.TaskID)
		cancel()
		if err != nil && wctx.Err() == nil {
			return nil, nil, taskError(err)
		}
	}
	return t.taskResult(sess, in.TaskID)
}

func (t *mcpTools) killTask(ctx context.Context, req *mcp.CallToolRequest, in KillTaskInput) (*mcp.CallToolResult, *TaskOutput, error) {
	sess, err := t.sess.lookup(req.Session, t.caller(ctx, req))
	if err != nil {
		return nil, nil, err
	}
	if err := sess.Kill(in.TaskID); err != nil {
		return nil, nil, taskError(err)
	}
	wctx, cancel := context.WithTimeout(ctx, killWait)
	_ = sess.Wait(wctx, in.TaskID)
	cancel()
	return t.taskResult(sess, in.TaskID)
}

func (t *mcpTools) listTasks(ctx context.Context, req *mcp.CallToolRequest, _ ListTasksInput) (*mcp.CallToolResult, *TaskList, error) {
	out := &TaskList{Tasks: []TaskOutput{}}
	sess, err := t.sess.lookup(req.Session, t.caller(ctx, req))
	if gone := (*goneError)(nil); errors.As(err, &gone) {
		return nil, nil, err
	}
	if err == nil {
		for _, st := range sess.Jobs() {
			out.Tasks = append(out.Tasks, *taskOf(st))
		}
	}
	var b strings.Builder
	if len(out.Tasks) == 0 {
		b.WriteString("No tasks.")
	}
	for _, task := range out.Tasks {
		fmt.Fprintf(&b, "%s %s", task.TaskID, task.State)
		if task.ExitCode != nil {
			fmt.Fprintf(&b, " (exit code %d)", *task.ExitCode)
		}
		if task.Description != "" {
			fmt.Fprintf(&b, ": %s", task.Description)
		}
		fmt.Fprintf(&b, ": %s\n", strings.Join(task.Command, " "))
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}}, out, nil
}

func (t *mcpTools) taskResult(sess *session.Session, id string) (*mcp.CallToolResult, *TaskOutput, error) {
	st, err := sess.Job(id, session.Offsets{})
	if err != nil {
		return nil, nil, taskError(err)
	}
	out := taskOf(st)
	out.Stdout, _ = capChars(out.Stdout, t.opts.MaxOutput, st.Next.Stdout)
	out.Stderr, _ = capChars(out.Stderr, t.opts.MaxOutput, st.Next.Stderr)
	var b strings.Builder
	fmt.Fprintf(&b, "Task %s", out.TaskID)
	if out.Description != "" {
		fmt.Fprintf(&b, " (%s)", out.Description)
	}
	fmt.Fprintf(&b, ": %s", out.State)
	if out.ExitCode != nil {
		fmt.Fprintf(&b, ", exit code %d", *out.ExitCode)
	}
	if out.Error != "" {
		fmt.Fprintf(&b, " (%s)", out.Error)
	}
	b.WriteString("\n")
	if out.Stdout != "" {
		fmt.Fprintf(&b, "<stdout>\n%s</stdout>\n", out.Stdout)
	}
	if out.Stderr != "" {
		fmt.Fprintf(&b, "<stderr>\n%s</stderr>\n", out.Stderr)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}}, out, nil
}

func taskOf(st *session.JobStatus) *TaskOutput {
	j := jobOf(st)
	return &TaskOutput{TaskID: j.JobID, Command: j.Command, Description: st.Description, State: j.State, ExitCode: j.ExitCode,
		Stdout: j.Stdout, Stderr: j.Stderr, Error: j.Error, Verdict: j.Verdict}
}

func taskError(err error) error {
	if errors.Is(err, session.ErrNotFound) {
		return errors.New("no such task in this session")
	}
	return err
}

// backgroundText is bash's answer to a run_in_background call: the task's
// id and the calls that follow it, spelled as a model writes them.
func backgroundText(id string) string {
	return fmt.Sprintf("Started background task %s; read its output with task_output {\"task_id\":%q} "+
		"(it waits for the task to end, up to 30 s; add \"block\":false to look at once), "+
		"stop it with kill_task {\"task_id\":%q}.", id, id, id)
}
