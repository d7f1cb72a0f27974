package policy

import (
	"fmt"
	"path"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Input is the document a policy decides on, input in Rego. The front end
// fills what the request says (Command, Args, Env, Cwd, Caller, FrontEnd,
// SessionID, Limits, Background, and Shell.Source in shell mode); Complete
// adds what jaild finds out (Path, Hash, Writable, Shell.Commands,
// Shell.Dynamic). A request that is not a run (Action) says what it is
// about in the fields that fit it (Caller, FrontEnd, SessionID, Env, Cwd,
// File) and is decided by ActionQuery.
type Input struct {
	// Action is what is asked: ActionRun (a run: empty means one too, and
	// the input then always holds "run") or another Action*.
	Action string `json:"action,omitempty"`
	// Command is the executable as requested: a name looked up in PATH,
	// or a path. In shell mode it is the shell that runs Shell.Source.
	Command string `json:"command"`
	// Path is where Command resolves in the sandbox's root, with every
	// symlink and .. resolved, so it names the file that would run.
	Path string `json:"path"`
	// Hash is the SHA-256 of that file, lowercase hex; empty when the
	// file is in a place the sandbox writes (Writable).
	Hash string `json:"hash"`
	// Writable is true when the sandbox can change what Command runs
	// between this decision and the exec: the file is in, or was found
	// through, one of ViewMounts (the working directory, /tmp...). A
	// policy that trusts a name or a hash must deny it.
	Writable bool     `json:"writable"`
	Args     []string `json:"args"`
	// Env is the environment the command gets, jaild's fixed defaults
	// (PATH, HOME, USER, LANG, unless set) left out: the caller's, and in
	// a session the session's merged under it.
	Env map[string]string `json:"env"`
	// Cwd is where the command starts (in a session, the session's
	// directory unless the request names one).
	Cwd string `json:"cwd,omitempty"`
	// Caller is the token's name or the socket peer; FrontEnd is run,
	// raw, mcp:bash, mcp:execute...
	Caller    string `json:"caller,omitempty"`
	FrontEnd  string `json:"front_end,omitempty"`
	SessionID string `json:"session_id,omitempty"`
	// Limits are the request's effective limits, as the front end names
	// them.
	Limits     map[string]any `json:"limits,omitempty"`
	Background bool           `json:"background"`
	// Shell is set in shell mode only.
	Shell *Shell `json:"shell,omitempty"`
	// File is the path in the sandbox (below the working directory, e.g.
	// /work/...) a files action is about.
	File string `json:"file,omitempty"`
	// Unset lists the variables a session.env action removes.
	Unset []string `json:"unset,omitempty"`

	// Workspace is the host directory the sandbox sees as its working
	// directory (a session's workspace); empty means a fresh, empty one.
	// Not part of the document: it says where to resolve.
	Workspace string `json:"-"`
}

// Actions: what an Input asks.
const (
	ActionRun = "run"
	// ActionSessionCreate: a session is made with Env and Cwd.
	ActionSessionCreate = "session.create"
	// ActionSessionEnv: a session's environment gets Env and loses Unset.
	ActionSessionEnv = "session.env"
	// ActionFilesRead, ActionFilesWrite, ActionFilesDelete: the files
	// API reads, writes (a file or a tar unpacked below File), or
	// removes File in a session's workspace.
	ActionFilesRead   = "files.read"
	ActionFilesWrite  = "files.write"
	ActionFilesDelete = "files.delete"
)

// Shell is the parse of a shell-mode command string.
type Shell struct {
	Source string `json:"source"`
	// Commands is every simple command in Source, wherever it is:
	// pipelines, lists, subshells, command substitutions, backticks,
	// function bodies, here-documents, process substitutions, and the
	// literal scripts of sh -c.
	Commands []Command `json:"commands"`
	// Dynamic is true when Source may run a command that is not in
	// Commands: a command name that is not a literal, eval, source, ...;
	// Reasons says why.
	Dynamic bool     `json:"dynamic"`
	Reasons []string `json:"reasons,omitempty"`
	// Functions are the functions Source defines, with the commands
	// their bodies call (a function that calls itself is how a fork bomb
	// looks).
	Functions []Function `json:"functions"`
}

// Function is a shell function definition.
type Function struct {
	Name  string   `json:"name"`
	Calls []string `json:"calls"`
}

// Command is one simple command of a shell string.
type Command struct {
	// Command is the name as written, unquoted, after the wrappers in
	// Via; for a name that is not a literal, its source text.
	Command string `json:"command"`
	// Path, Hash and Writable are as for Input; Path and Hash are empty
	// for a name that does not resolve, such as a shell builtin or
	// function, and Writable true if the sandbox could put one there.
	Path     string   `json:"path"`
	Hash     string   `json:"hash"`
	Writable bool     `json:"writable"`
	Args     []string `json:"args"`
	// Via lists the wrappers the command was found behind, outermost
	// first: env, exec, command, nohup, timeout, nice, stdbuf, setsid,
	// time, busybox, sh -c.
	Via []string `json:"via,omitempty"`
	// Dynamic is true when the name or an argument is not a literal; an
	// argument that is not is given as its source text.
	Dynamic bool `json:"dynamic,omitempty"`

	// exe is the name to resolve: Command, or busybox for busybox X.
	exe string
}

// Complete resolves in.Command (and, in shell mode, parses in.Shell.Source
// and resolves each command in it) with r. The error is what the caller
// must deny with; in shell mode a command that does not resolve is no
// error, as builtins and functions do not.
func Complete(in *Input, r Resolver) error {
	if in.Args == nil {
		in.Args = []string{}
	}
	if in.Env == nil {
		in.Env = map[string]string{}
	}
	vr := viewOf(r)
	pathEnv := in.Env["PATH"]
	if in.Shell != nil {
		if in.Command == "" {
			in.Command, in.Args = "sh", []string{"-c", in.Shell.Source}
		}
		sh, err := parseInput(in, r, vr, pathEnv)
		if err != nil {
			return err
		}
		for i := range sh.Commands {
			c := &sh.Commands[i]
			if c.exe == "" {
				continue // not a literal
			}
			res, err := vr.ResolveIn(in.Workspace, c.exe, pathEnv, in.Cwd)
			if err == nil {
				c.Path, c.Hash = res.Path, res.Hash
			}
			c.Writable = res.Writable
		}
		in.Shell = sh
	}
	res, err := vr.ResolveIn(in.Workspace, in.Command, pathEnv, in.Cwd)
	in.Writable = res.Writable
	if err != nil {
		return &ResolveError{Command: in.Command, Err: err}
	}
	in.Path, in.Hash = res.Path, res.Hash
	return nil
}

// viewOf returns r as a ViewResolver: Root's batch for one decision, r
// itself if it is one, or r with Writable guessed from the paths.
func viewOf(r Resolver) ViewResolver {
	switch v := r.(type) {
	case batcher:
		return v.batch()
	case ViewResolver:
		return v
	}
	return plainView{r}
}

// plainView is a Resolver that knows no view (a test's, a custom one): an
// answer is Writable if the path, the name or any PATH entry it could
// have been looked up in is in a ViewMount (of the default working
// directory: a custom resolver for another one is a ViewResolver).
type plainView struct{ r Resolver }

func (p plainView) ResolveIn(_, name, pathEnv, cwd string) (Resolution, error) {
	pa, h, err := p.r.Resolve(name, pathEnv, cwd)
	res := Resolution{Path: pa, Hash: h, Writable: inView(pa)}
	if cwd == "" {
		cwd = DefaultCwd
	}
	if strings.Contains(name, "/") {
		res.Writable = res.Writable || inView(path.Join(cwd, name))
	} else {
		if pathEnv == "" {
			pathEnv = DefaultPath
		}
		for _, dir := range strings.Split(pathEnv, ":") {
			res.Writable = res.Writable || inView(path.Join(cwd, dir))
		}
	}
	if res.Writable {
		res.Hash = ""
	}
	return res, err
}

// inView reports whether the sandbox path p is below a ViewMount.
func inView(p string) bool {
	if !path.IsAbs(p) {
		return false
	}
	for _, m := range ViewMounts {
		if p == m || strings.HasPrefix(p, m+"/") {
			return true
		}
	}
	return false
}

// ResolveError is a command that does not resolve to an executable file.
type ResolveError struct {
	Command string
	Err     error
}

func (e *ResolveError) Error() string {
	return fmt.Sprintf("Failed to resolve executable path for '%s': %v", e.Command, e.Err)
}

func (e *ResolveError) Unwrap() error { return e.Err }

// value converts in to OPA's value directly: going through JSON, as
// rego.EvalInput does, costs more than the evaluation. The keys are terms
// made once and shared by every input (OPA shares its interned terms so
// too: terms in an input are never modified). Each object is made whole
// from its pairs (ast.NewObject keeps them in one block, where Insert
// allocates each), and the strings' terms come in blocks: a decision
// allocates in a heap its idle pause has left cold, where each allocation
// costs more than the work it is for.
func (in *Input) value() ast.Value {
	action := in.Action
	if action == "" {
		action = ActionRun
	}
	var b termBlock
	kv := make([][2]*ast.Term, 0, 17)
	kv = append(kv,
		[2]*ast.Term{keyAction, b.str(action)},
		[2]*ast.Term{keyCommand, b.str(in.Command)},
		[2]*ast.Term{keyPath, b.str(in.Path)},
		[2]*ast.Term{keyHash, b.str(in.Hash)},
		[2]*ast.Term{keyWritable, ast.InternedTerm(in.Writable)},
		[2]*ast.Term{keyArgs, b.strArray(in.Args)},
		[2]*ast.Term{keyEnv, b.stringMap(in.Env)},
		[2]*ast.Term{keyCwd, b.str(in.Cwd)},
		[2]*ast.Term{keyCaller, b.str(in.Caller)},
		[2]*ast.Term{keyFrontEnd, b.str(in.FrontEnd)},
		[2]*ast.Term{keyBackground, ast.InternedTerm(in.Background)})
	if in.SessionID != "" {
		kv = append(kv, [2]*ast.Term{keySessionID, b.str(in.SessionID)})
	}
	if in.File != "" {
		kv = append(kv, [2]*ast.Term{keyFile, b.str(in.File)})
	}
	if in.Unset != nil {
		kv = append(kv, [2]*ast.Term{keyUnset, b.strArray(in.Unset)})
	}
	if in.Limits != nil {
		if v, err := ast.InterfaceToValue(in.Limits); err == nil {
			kv = append(kv, [2]*ast.Term{keyLimits, ast.NewTerm(v)})
		}
	}
	if in.Shell != nil {
		kv = append(kv, [2]*ast.Term{keyShell, in.Shell.term(&b)})
	}
	return ast.NewObject(kv...)
}

// term is input.shell.
func (sh *Shell) term(b *termBlock) *ast.Term {
	cmds := make([]*ast.Term, len(sh.Commands))
	for i := range sh.Commands {
		c := &sh.Commands[i]
		cmds[i] = b.object(
			[2]*ast.Term{keyCommand, b.str(c.Command)},
			[2]*ast.Term{keyPath, b.str(c.Path)},
			[2]*ast.Term{keyHash, b.str(c.Hash)},
			[2]*ast.Term{keyWritable, ast.InternedTerm(c.Writable)},
			[2]*ast.Term{keyArgs, b.strArray(c.Args)},
			[2]*ast.Term{keyVia, b.strArray(c.Via)},
			[2]*ast.Term{keyDynamic, ast.InternedTerm(c.Dynamic)})
	}
	fns := make([]*ast.Term, len(sh.Functions))
	for i, f := range sh.Functions {
		fns[i] = b.object([2]*ast.Term{keyName, b.str(f.Name)}, [2]*ast.Term{keyCalls, b.strArray(f.Calls)})
	}
	return b.object(
		[2]*ast.Term{keySource, b.str(sh.Source)},
		[2]*ast.Term{keyCommands, b.array(cmds)},
		[2]*ast.Term{keyDynamic, ast.InternedTerm(sh.Dynamic)},
		[2]*ast.Term{keyReasons, b.strArray(sh.Reasons)},
		[2]*ast.Term{keyFunctions, b.array(fns)})
}

// termBlock hands out the terms of one input from blocks it allocates.
type termBlock struct{ terms []ast.Term }

// term is a new term of v.
func (b *termBlock) term(v ast.Value) *ast.Term {
	if len(b.terms) == cap(b.terms) {
		b.terms = make([]ast.Term, 0, 32)
	}
	b.terms = append(b.terms, ast.Term{Value: v})
	return &b.terms[len(b.terms)-1]
}

// str is s as a term; "" is shared.
func (b *termBlock) str(s string) *ast.Term {
	if s == "" {
		return emptyString
	}
	return b.term(ast.String(s))
}

// object is the object of kv, whose keys are distinct.
func (b *termBlock) object(kv ...[2]*ast.Term) *ast.Term {
	return b.term(ast.NewObject(kv...))
}

// array is the array of ts; the empty one is shared.
func (b *termBlock) array(ts []*ast.Term) *ast.Term {
	if len(ts) == 0 {
		return emptyArray
	}
	return b.term(ast.NewArray(ts...))
}

func (b *termBlock) strArray(ss []string) *ast.Term {
	if len(ss) == 0 {
		return emptyArray
	}
	ts := make([]*ast.Term, len(ss))
	for i, s := range ss {
		ts[i] = b.str(s)
	}
	return b.array(ts)
}

func (b *termBlock) stringMap(m map[string]string) *ast.Term {
	kv := make([][2]*ast.Term, 0, len(m))
	for k, v := range m {
		kv = append(kv, [2]*ast.Term{b.str(k), b.str(v)})
	}
	return b.object(kv...)
}

// The input's keys.
var (
	keyAction, keyCommand, keyPath, keyHash = ast.StringTerm("action"), ast.StringTerm("command"), ast.StringTerm("path"), ast.StringTerm("hash")
	keyWritable, keyArgs, keyEnv, keyCwd    = ast.StringTerm("writable"), ast.StringTerm("args"), ast.StringTerm("env"), ast.StringTerm("cwd")
	keyCaller, keyFrontEnd, keyBackground   = ast.StringTerm("caller"), ast.StringTerm("front_end"), ast.StringTerm("background")
	keySessionID, keyFile, keyUnset         = ast.StringTerm("session_id"), ast.StringTerm("file"), ast.StringTerm("unset")
	keyLimits, keyShell, keySource          = ast.StringTerm("limits"), ast.StringTerm("shell"), ast.StringTerm("source")
	keyCommands, keyDynamic, keyReasons     = ast.StringTerm("commands"), ast.StringTerm("dynamic"), ast.StringTerm("reasons")
	keyFunctions, keyVia, keyName, keyCalls = ast.StringTerm("functions"), ast.StringTerm("via"), ast.StringTerm("name"), ast.StringTerm("calls")
)

// The shared empty string and array: terms of an input are never
// modified.
var emptyString, emptyArray = ast.StringTerm(""), ast.ArrayTerm()
