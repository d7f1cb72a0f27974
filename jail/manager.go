package jail

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/cgroup"
	"github.com/jaild/jaild/fdstore"
	"github.com/jaild/jaild/rootfs"
	"github.com/opencontainers/cgroups"
	devices "github.com/opencontainers/cgroups/devices/config"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"golang.org/x/sys/unix"

	// The cgroup device controller implementation, registered by import.
	_ "github.com/opencontainers/cgroups/devices"
	// nsenter's C constructor sets up namespaces when this binary is
	// re-executed as a container's init; without it every start fails
	// with "can't get final child's PID from pipe: EOF".
	_ "github.com/opencontainers/runc/libcontainer/nsenter"
)

// DefaultStateDir is where jaild keeps its state: on tmpfs, so a reboot,
// which ends every sandbox, also clears their state.
const DefaultStateDir = "/run/jaild"

// sandboxUser is the unprivileged user commands run as.
var sandboxUser = rootfs.User{Name: "sandbox", UID: SandboxUID, GID: SandboxGID}

// Config configures a [Manager]. The zero value is usable: every field
// documents what its zero means.
type Config struct {
	// StateDir holds container state, the rootfs template and the locks
	// that mark the users of the parent cgroup; empty means
	// DefaultStateDir. Every jaild sharing a CgroupParent must use the
	// same state dir, or one may remove the parent under another.
	StateDir string
	// WorkspaceRoot is where workspaces' tmpfs are mounted, at
	// <WorkspaceRoot>/<id>; empty means <StateDir>/workspaces. A root
	// outside the state dir must be root's, writable by no one else up
	// to /, and closed to group and others; it is made (mode 0700) if
	// missing (see workspaceroot.go).
	WorkspaceRoot string
	// Rootfs is "host" (or empty) for the generated read-only template
	// over the host's /usr, or the path of a prepared directory, which
	// must have a directory at WorkDir to mount on.
	Rootfs string
	// WorkDir is the sandbox's working directory: the size-capped tmpfs
	// (or a session's workspace) mounted there is the default cwd and
	// HOME, and the sandbox user's home in the generated template's
	// /etc/passwd. Empty means DefaultDir; see ValidateWorkDir.
	WorkDir string
	// CgroupParent overrides where sandbox cgroups go (see package
	// cgroup); empty means automatic.
	CgroupParent string
	// Budget is the aggregate limit for all sandboxes under the parent;
	// a zero field means its default: half the host's memory, 16384
	// pids, all CPUs. It is applied when this Manager creates the parent
	// and, if KeepBudget is false, also when it joins an existing one.
	Budget cgroup.Budget
	// KeepBudget leaves an existing parent's budget as it is: a one-shot
	// run joining the parent of a running daemon should not reset the
	// daemon's budget.
	KeepBudget bool
	// TeardownBacklog is how many finished sandboxes may be destroyed in
	// the background, after their runs returned (see teardown.go); zero
	// means DefaultTeardownBacklog, negative none (every run returns
	// after its teardown).
	TeardownBacklog int
	// PrestartIdle is how long a workspace made WithPrestart keeps its
	// waiting sandboxes without a run; after it, it goes dormant (see
	// WithPrestart). Zero means DefaultPrestartIdle, negative never.
	PrestartIdle time.Duration
	// PrestartBuilds is how many prestarted sandboxes of workspaces are
	// built at once while no run waits for them (see prestartgate.go).
	// Zero means half of GOMAXPROCS (the CPUs this process uses; in a
	// container, its CPU limit), at least one; negative, no bound.
	PrestartBuilds int
	// PrivateMounts says this process is alone in a mount namespace made
	// for it (the daemon's worker, see PrivateMountsWork). The Manager
	// makes the namespace a slave of the one it was copied from, so that
	// nothing mounted in it goes elsewhere, and binds the root template's
	// read-only host paths into the template there once, for every
	// sandbox, instead of in each sandbox's init (see privatemounts.go).
	// New refuses it in its parent's mount namespace, and with an
	// operator's WorkspaceRoot. Workspaces not detached are then reached
	// through /proc/<pid>/root (Workspace.Dir).
	PrivateMounts bool
	// Logger receives debug and warning messages; nil discards them.
	Logger *slog.Logger
}

// Manager builds sandboxes. It is safe for concurrent use.
type Manager struct {
	stateDir   string
	containers string // libcontainer's state root
	slotDir    string
	root       *rootfs.Root
	workDir    string
	parent     *cgroup.Parent
	dog        *watchdog
	teardowns  *teardowns
	log        *slog.Logger
	// handoverHook, if set (by tests), runs once a waiting sandbox's
	// command is handed over, before the rest of its pins are taken.
	handoverHook func()
	// limitsHook, if set (by tests), runs before a started sandbox's
	// limits are set; its error fails the setting.
	limitsHook func() error
	// prestartHook, if set (by tests), runs before a workspace's
	// prestarted sandbox is built, once the prestart gate let it by.
	prestartHook func(*Workspace)
	rlimits      []configs.Rlimit // every sandbox's (see sandboxRlimits)
	// bound are the host paths bound into the root template once, with
	// Config.PrivateMounts; nil otherwise. ownRoot is then
	// /proc/<pid>/root, through which other processes reach the mounts
	// of this process's namespace (its attached workspaces).
	bound   *templateBinds
	ownRoot string
	// roots is where each sandbox's own root is made, with
	// Config.PrivateMounts and the generated template (see
	// sandboxroot.go); nil otherwise.
	roots *roots
	// prestartIdle is Config.PrestartIdle: positive, or 0 for never.
	prestartIdle time.Duration
	// prestartGate bounds the builds of Config.PrestartBuilds.
	prestartGate prestartGate

	// workspaces is the workspace root (real path); defaultWorkspaces
	// says it is <stateDir>/workspaces, which NewWorkspace makes.
	workspaces        string
	defaultWorkspaces bool
	// detached: workspaces' tmpfs are detached mounts (see
	// workspacemount.go), not mounted in the workspace root.
	detached bool
	// dev is the shared /dev that every sandbox binds (see devdir.go),
	// or nil: each sandbox's init makes a /dev of its own.
	dev *os.File
	// filter is the seccomp program that waiting sandboxes load
	// themselves, as its frame, probed at the first one's build (see
	// seccompprobe.go); nil after filterOnce: they keep the profile in
	// libcontainer's config. noFilterProbe (tests) skips the probe.
	filterOnce    sync.Once
	filter        []byte
	noFilterProbe bool
	// filterFrameHook, if set (by tests), replaces the filter's frame
	// that a waiting sandbox's init reads.
	filterFrameHook func([]byte) []byte

	// fds keeps what workspaces hold for their life out of the
	// process's file table (see package fdstore), started by the first
	// workspace; nil if it could not start (they then hold it in the
	// table).
	fdsOnce sync.Once
	fds     *fdstore.Store

	mu     sync.Mutex
	closed bool
	live   sync.WaitGroup
}

// New checks the host, prepares the rootfs and the parent cgroup, and sweeps
// the sandboxes of any jaild that died.
//
// New leaves the process's environment alone. libcontainer passes one
// variable of it, GOMAXPROCS, and no other, to every sandbox's init, a Go
// process that lives for a few milliseconds and does single-threaded work:
// whoever starts the process that calls New decides it (jaild gives its
// sandbox-building processes GOMAXPROCS=1, see internal/command).
func New(cfg Config) (*Manager, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	// Checked before anything is written into it (see trust.go). It must
	// be traversable (not readable) by the sandboxes' unprivileged root,
	// which mounts the rootfs template inside it.
	stateDir, err := makeTrustedDir("state dir", cfg.StateDir, 0o711)
	if err != nil {
		return nil, err
	}
	// The workspace root too, before anything is built: a bad one is a
	// start-up error, not a failure of the first session.
	workspaces, defWS, err := openWorkspaceRoot(cfg.WorkspaceRoot, stateDir, SlotDir)
	if err != nil {
		return nil, err
	}
	m := &Manager{
		stateDir:   stateDir,
		containers: filepath.Join(stateDir, "containers"),
		slotDir:    SlotDir,
		workDir:    cfg.WorkDir,
		teardowns:  newTeardowns(cfg.TeardownBacklog),
		log:        cfg.Logger,
	}
	switch {
	case cfg.PrestartIdle == 0:
		m.prestartIdle = DefaultPrestartIdle
	case cfg.PrestartIdle > 0:
		m.prestartIdle = cfg.PrestartIdle
	}
	m.prestartGate = newPrestartGate(cfg.PrestartBuilds)
	m.rlimits, _ = sandboxRlimits()
	m.workspaces, m.defaultWorkspaces = workspaces, defWS
	m.useDetachedMounts()
	if cfg.PrivateMounts {
		if err := m.checkPrivateMounts(); err != nil {
			m.closeDev()
			return nil, err
		}
	}
	// The parent cgroup first: creating it starts, in the background, the
	// kernel's wait that the first sandbox's cgroup join would otherwise
	// pay (see cgroup.Parent.Warm); everything below overlaps that wait.
	m.parent, err = cgroup.Open(cgroup.Options{
		Path:    cfg.CgroupParent,
		LockDir: filepath.Join(m.stateDir, "cgroup-locks"),
		Budget:  budgetDefaults(cfg.Budget),
		Keep:    cfg.KeepBudget,
	})
	if err != nil {
		m.closeDev()
		return nil, fmt.Errorf("%w: %w", box.ErrUnsupported, err)
	}
	// The watchdog comes after the parent cgroup, which on v2 may move
	// jaild to a leaf first.
	m.startWatchdog()
	err = m.prepare(cfg.Rootfs)
	if err == nil && cfg.PrivateMounts {
		err = m.bindTemplate()
		if err == nil && m.root.Host() {
			err = m.mountRoots()
		}
	}
	if err != nil {
		if m.bound != nil {
			_ = m.bound.unmount()
		}
		m.dog.close()
		_ = m.parent.Close()
		m.closeDev()
		return nil, err
	}
	if n, err := m.Sweep(); err != nil {
		m.log.Warn("sweeping orphaned sandboxes", "found", n, "err", err)
	} else if n > 0 {
		m.log.Info("swept orphaned sandboxes", "count", n)
	}
	return m, nil
}

// setDefaults checks that jaild can build sandboxes here (root, user
// namespaces) and fills in cfg's unset fields, refusing a bad WorkDir.
func (cfg *Config) setDefaults() error {
	if os.Geteuid() != 0 {
		return box.ErrNotRoot
	}
	if err := checkUserns(); err != nil {
		return err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.StateDir == "" {
		cfg.StateDir = DefaultStateDir
	}
	if cfg.WorkDir == "" {
		cfg.WorkDir = box.DefaultDir
	}
	return ValidateWorkDir(cfg.WorkDir)
}

// useDetachedMounts makes the default workspaces and the sandboxes' /dev
// detached mounts where the kernel allows it (see workspacemount.go and
// devdir.go).
func (m *Manager) useDetachedMounts() {
	detached := !attachedOnly && detachedMountsWork()
	m.detached = m.defaultWorkspaces && detached
	if !detached {
		return
	}
	dev, err := newSharedDev()
	if err != nil {
		// The init's own /dev is as strong, only slower to make.
		m.log.Warn("sandboxes make their own /dev", "err", err)
		return
	}
	m.dev = dev
}

// startWatchdog starts the watchdog that tears the sandboxes down if this
// process dies (see watchdog.go); its start overlaps the rest of the
// set-up.
func (m *Manager) startWatchdog() {
	m.dog = newWatchdog(watchdogConfig{
		Owner:      os.Getpid(),
		SlotDir:    m.slotDir,
		LockDir:    filepath.Join(m.stateDir, "cgroup-locks"),
		ParentDirs: m.parent.Dirs(),
		Verbose:    m.log.Enabled(context.Background(), slog.LevelInfo),
	}, m.log)
	m.dog.startAsync()
}

// HostRoot is the generated root that sandboxes get without a prepared
// one (rootfs.Host under stateDir, with the working directory workDir),
// made if it is not there yet: what their "/" holds, for those that must
// see what a sandbox sees (the policy's resolver). The state dir is checked
// and made as New makes it.
func HostRoot(stateDir, workDir string) (*rootfs.Root, error) {
	stateDir, err := makeTrustedDir("state dir", stateDir, 0o711)
	if err != nil {
		return nil, err
	}
	r, err := rootfs.Host(stateDir, sandboxUser, workDir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", box.ErrRootfs, err)
	}
	return r, nil
}

// prepare makes the other state dirs and opens the rootfs, each only once
// it is known that no one but root can change it (see trust.go).
func (m *Manager) prepare(root string) error {
	var err error
	if m.containers, err = makeTrustedDir("state dir", m.containers, 0o700); err != nil {
		return err
	}
	if m.slotDir, err = makeTrustedDir("slot dir", m.slotDir, 0o700); err != nil {
		return err
	}
	if root == "" || root == "host" {
		m.root, err = rootfs.Host(m.stateDir, sandboxUser, m.workDir)
	} else {
		// A prepared root's contents are the operator's choice; that no
		// other user can swap the directory is checked here.
		if root, err = trustedDir("rootfs", root, true); err != nil {
			return err
		}
		m.root, err = rootfs.Open(root, m.workDir)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", box.ErrRootfs, err)
	}
	return nil
}

func budgetDefaults(b cgroup.Budget) cgroup.Budget {
	if b.Memory == 0 {
		var si unix.Sysinfo_t
		if unix.Sysinfo(&si) == nil {
			b.Memory = int64(si.Totalram) * int64(si.Unit) / 2
		}
	}
	if b.Pids == 0 {
		b.Pids = 16384
	}
	if b.CPUs == 0 {
		b.CPUs = float64(runtime.NumCPU())
	}
	return b
}

// WorkDir is the sandboxes' working directory (see Config.WorkDir).
func (m *Manager) WorkDir() string { return m.workDir }

// validate is spec.Validate with the command's directory checked against
// this Manager's working directory.
func (m *Manager) validate(spec *Spec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	return box.CheckDir(spec.Dir, m.workDir)
}

// checkUserns fails if the kernel cannot create user namespaces.
func checkUserns() error {
	if _, err := os.Stat("/proc/self/ns/user"); err != nil {
		return fmt.Errorf("%w: kernel has no user namespaces", box.ErrUnsupported)
	}
	data, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
	if err == nil && strings.TrimSpace(string(data)) == "0" {
		return fmt.Errorf("%w: user namespaces are disabled (user.max_user_namespaces = 0)", box.ErrUnsupported)
	}
	return nil
}

// Run runs spec in a fresh sandbox and destroys the sandbox: after it
// returns, in the background, unless the teardown backlog is full or the
// sandbox is on a workspace (see teardown.go). A spec that
// fails validation is returned as an *InvalidError before anything is built.
// When the timeout expires the result has TimedOut set and err is nil; when
// ctx ends first, the sandbox is killed and Run returns the partial result
// (Canceled set) with ctx's error.
func (m *Manager) Run(ctx context.Context, spec *Spec) (*box.Result, error) {
	if err := m.validate(spec); err != nil {
		return nil, err
	}
	sb, err := m.create(ctx, spec.Limits, spec.Workspace, spec.Egress != nil, false)
	if err != nil {
		return nil, err
	}
	cmd := &spec.Command
	var stopEgress func() *box.EgressUsage
	if spec.Egress != nil {
		// The proxy is served before the command starts, and stopped
		// only once the sandbox's processes are dead (Run returns after
		// its init was reaped, which killed the rest).
		stopEgress = serveEgress(ctx, spec.Egress, sb.proxy)
		c := *cmd
		c.Env = append(proxyEnv(), cmd.Env...)
		cmd = &c
	} else if spec.Workspace != nil && spec.Workspace.proxied {
		// The workspace's proxy is its caller's to serve (a session's).
		c := *cmd
		c.Env = append(proxyEnv(), cmd.Env...)
		cmd = &c
	}
	res, err := sb.Run(ctx, cmd)
	if stopEgress != nil {
		usage := stopEgress()
		if res != nil {
			res.Egress = usage
		}
	}
	// The result is complete: the command has exited, its counters
	// were read and its proxy stopped. A workspace's next sandbox may
	// expect this one gone.
	var derr error
	if spec.Workspace != nil {
		derr = m.destroy(sb)
	} else {
		derr = m.release(sb)
	}
	if err == nil {
		err = derr
	}
	return res, err
}

// create builds a sandbox with limits l, ready to run one command, on its
// own uid slot or, if ws is not nil, on the workspace's (see [Workspace]).
// Its uid range, cgroup parent and configuration are fixed here, so a pool
// can create sandboxes ahead of time. With egress, its network namespace is
// made here with a proxy listener in it (see [Egress]). The caller must
// Destroy it.
//
// With ownFilter, the sandbox's init loads the seccomp filter itself (a
// waiting sandbox's, see seccompprobe.go), and libcontainer's config leaves
// it out.
func (m *Manager) create(ctx context.Context, l box.Limits, ws *Workspace, egress, ownFilter bool) (*sandbox, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := m.addLive(); err != nil {
		return nil, err
	}
	if m.bound != nil {
		if err := m.bound.refresh(); err != nil {
			m.live.Done()
			return nil, err
		}
	}
	// The sandbox's init joins its cgroup in a few milliseconds; the
	// kernel's wait that the join may need starts now (see cgroup.Parent.Warm).
	m.parent.Warm()

	l = l.WithDefaults()
	id := uuid.NewString()
	rec := &record{ID: id, StateRoot: m.containers, Cgroup: m.parent.Child(id), Owner: os.Getpid(), NetNS: egress}
	sb := &sandbox{m: m, id: id, ws: ws, limits: l, group: rec.Cgroup}
	if err := m.reserve(sb, rec, egress); err != nil {
		m.live.Done()
		return nil, err
	}
	// From here on a failure undoes the reservation.
	fail := func(err error) (*sandbox, error) {
		m.unreserve(sb)
		m.live.Done()
		return nil, err
	}
	work, netns := "", sb.netns
	if sb.join != nil {
		work, netns = sb.join.dir, sb.join.netns
	}
	if netns == "" {
		var err error
		if sb.net, err = newNetNS(nil); err != nil {
			return fail(fmt.Errorf("sandbox network namespace: %w", err))
		}
		netns, sb.ownNet = procFD(sb.net), true
	}
	cfg := m.containerConfig(id, sb.hostID, l, work, netns)
	if ownFilter {
		cfg.Seccomp = nil
	}
	if m.roots != nil {
		var err error
		if sb.root, err = m.roots.make(id, sb.hostID, cfg, m.devPath()); err != nil {
			return fail(err)
		}
	}
	c, err := libcontainer.Create(m.containers, id, cfg)
	if err != nil {
		return fail(fmt.Errorf("create sandbox: %w", err))
	}
	sb.c = c
	return sb, nil
}

// reserve gives sb, not created yet, its uid range: a slot of its own,
// recorded as rec, or a place on its workspace. With egress (only on a
// slot of its own) it also makes sb's network namespace with the proxy
// listener in it. On error it has left nothing reserved.
func (m *Manager) reserve(sb *sandbox, rec *record, egress bool) error {
	if egress {
		// Made before the record names it, so that a failure here
		// leaves nothing a sweep would have to know of.
		if _, err := makeTrustedDir("netns dir", filepath.Join(m.stateDir, "netns"), 0o700); err != nil {
			return err
		}
	}
	var err error
	if sb.ws == nil {
		sb.slot, err = acquireSlot(m.slotDir, rec, m.sweepRecord)
		if sb.slot != nil {
			sb.hostID = sb.slot.hostID()
		}
	} else {
		sb.hostID, sb.join, err = sb.ws.add(sb.id, rec.Cgroup)
	}
	if err != nil || !egress {
		return err
	}
	// The slot's record names the namespace from here on: a crash
	// leaves it to the sweep.
	netns := egressNetNS(m.containers, sb.id)
	proxy, err := newEgressNetNS(netns)
	if err != nil {
		sb.slot.release()
		return err
	}
	sb.netns, sb.proxy = netns, proxy
	return nil
}

// unreserve undoes reserve for a sandbox libcontainer failed to create.
func (m *Manager) unreserve(sb *sandbox) {
	sb.releaseStart()
	// Create writes only the state dir; nothing runs yet.
	_ = os.RemoveAll(filepath.Join(m.containers, sb.id))
	if sb.proxy != nil {
		sb.proxy.Close()
		if rerr := removeNetNS(sb.netns); rerr != nil {
			m.log.Warn("removing egress netns", "id", sb.id, "err", rerr)
		}
	}
	if sb.ws != nil {
		sb.ws.remove(sb.id)
	} else {
		sb.slot.release()
	}
}

// mounts are a sandbox's mounts, less the binds made once in the template
// (see privatemounts.go). Those its own root holds are among them (see
// sandboxroot.go).
func (m *Manager) mounts(tmpfsSize int64, work, dev string) []*configs.Mount {
	ms := m.root.Mounts(tmpfsSize, sandboxUser, work, dev)
	if m.bound != nil {
		ms = m.bound.drop(ms)
	}
	return ms
}

// containerConfig is the whole isolation policy of one sandbox. On a
// workspace it differs in one place only: the working directory is a bind
// of the workspace's tmpfs at the path work. The network namespace at the
// path netns, loopback only and up, is joined: the workspace's, an egress
// sandbox's (see [Egress]), or one made for the sandbox alone (see
// newNetNS).
func (m *Manager) containerConfig(id string, hostID int, l box.Limits, work, netns string) *configs.Config {
	// The devices a sandbox may use: the cgroup's rules, and the nodes
	// its init makes in its /dev unless it binds the shared one.
	var devs []*devices.Device
	var rules []*devices.Rule
	for _, d := range specconv.AllowedDevices {
		if d.Path != "" && m.dev == nil {
			devs = append(devs, d)
		}
		rules = append(rules, &d.Rule)
	}
	dev := m.devPath()
	pids := l.Pids
	quota, period := cgroup.CPUQuota(l.CPUs)
	oomScore := 1000 // the kernel's OOM killer picks sandboxes before jaild
	cfg := &configs.Config{
		Rootfs:     m.root.Dir,
		Readonlyfs: true,
		Hostname:   Hostname,
		Namespaces: configs.Namespaces{
			{Type: configs.NEWNS}, {Type: configs.NEWUTS}, {Type: configs.NEWIPC},
			{Type: configs.NEWPID}, {Type: configs.NEWNET, Path: netns}, {Type: configs.NEWUSER},
			{Type: configs.NEWCGROUP},
		},
		UIDMappings:     []configs.IDMap{{ContainerID: 0, HostID: int64(hostID), Size: slotSize}},
		GIDMappings:     []configs.IDMap{{ContainerID: 0, HostID: int64(hostID), Size: slotSize}},
		Capabilities:    &configs.Capabilities{}, // nil would keep them all
		NoNewPrivileges: true,
		Seccomp:         seccompProfile(),
		OomScoreAdj:     &oomScore,
		Mounts:          m.mounts(l.TmpfsSize, work, dev),
		Devices:         devs,
		// runc's default masks and read-only paths under /proc, where the
		// sandbox's procfs shows host-wide state. Entries this kernel lacks
		// cost one failed open each and stay, for kernels that have them.
		// runc's two masks under /sys are left out: no sysfs is mounted in
		// a sandbox, so they could only ever cover a prepared root's own
		// files.
		MaskPaths: []string{
			"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
			"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
		},
		ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		Rlimits:       m.rlimits,
		Cgroups: &cgroups.Cgroup{
			Path: m.parent.Child(id).Path,
			Resources: &cgroups.Resources{
				Memory:     l.Memory,
				MemorySwap: l.Memory, // equal to Memory: no swap
				PidsLimit:  &pids,
				CpuQuota:   quota,
				CpuPeriod:  period,
				Devices:    rules,
			},
		},
	}
	return cfg
}

// Sweep tears down the sandboxes that jaild processes on this installation
// (this state dir) left when they died, and reports how many it found.
// Sandboxes of live jaild processes are never touched; another
// installation's orphans are left to its own sweeps, or to the slot
// allocation that needs their uid range (see acquireSlot), unless that
// installation is gone (see abandoned).
func (m *Manager) Sweep() (int, error) {
	n, err := sweepSlots(m.slotDir, func(r *record) bool { return r.StateRoot == m.containers || abandoned(r) }, m.sweepRecord)
	pins, perr := m.sweepPins()
	return n + pins, errors.Join(err, perr)
}

// abandoned reports whether rec's installation is gone: its state root no
// longer exists, so no sweep of its own will come for the orphan (a test's
// installation removed after its jaild was killed, a state dir deleted by
// hand). Left alone, its record would hold the slot, and whatever of the
// sandbox is left (cgroups, a workspace's tmpfs), until slots ran out.
func abandoned(rec *record) bool {
	if rec.StateRoot == "" {
		return false
	}
	_, err := os.Stat(rec.StateRoot)
	return errors.Is(err, os.ErrNotExist)
}

// sweepRecord destroys the orphaned sandbox rec describes: libcontainer
// kills and destroys it if its state survived, and the cgroup removal
// catches a sandbox that died before its state was written.
func (m *Manager) sweepRecord(rec *record) error {
	if rec.Workspace {
		return m.sweepWorkspace(rec)
	}
	m.log.Info("sweeping orphaned sandbox", "id", rec.ID, "owner_pid", rec.Owner)
	var errs []error
	if c, err := libcontainer.Load(rec.StateRoot, rec.ID); err == nil {
		_ = c.Signal(unix.SIGKILL)
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if st, err := c.Status(); err != nil || st == libcontainer.Stopped {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := c.Destroy(); err != nil {
			errs = append(errs, err)
		}
	}
	if rec.Cgroup != nil && len(rec.Cgroup.Dirs) > 0 {
		if err := rec.Cgroup.Remove(); err != nil {
			errs = append(errs, err)
		}
	}
	if rec.StateRoot != "" && rec.ID != "" && !strings.ContainsAny(rec.ID, "/.") {
		if err := os.RemoveAll(filepath.Join(rec.StateRoot, rec.ID)); err != nil {
			errs = append(errs, err)
		}
		if rec.NetNS {
			if err := removeNetNS(egressNetNS(rec.StateRoot, rec.ID)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// addLive counts one more sandbox or workspace for Close to wait for, or
// returns box.ErrClosed if m is closed.
func (m *Manager) addLive() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return box.ErrClosed
	}
	m.live.Add(1)
	return nil
}

// Close waits for live sandboxes to be destroyed, then releases the parent
// cgroup (removing it if no other jaild uses it). Callers cancel running
// commands through their contexts first.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	m.live.Wait()
	if m.fds != nil {
		if err := m.fds.Shut(); err != nil {
			m.log.Warn("shutting the descriptor store", "err", err)
		}
	}
	m.closeDev()
	if m.bound != nil {
		if err := m.bound.unmount(); err != nil {
			m.log.Warn("unmounting the template's binds", "err", err)
		}
	}
	if m.roots != nil {
		if err := m.roots.unmount(); err != nil {
			m.log.Warn("unmounting the sandboxes' roots", "err", err)
		}
	}
	// The watchdog has nothing left to guard; it dies while the parent
	// is removed.
	m.dog.kill()
	err := m.parent.Close()
	m.dog.close()
	made, failed := m.parent.WarmStats()
	m.log.Debug("closed", "cgroup_warmups", made, "cgroup_warmups_failed", failed)
	return err
}

// fdStore returns the Manager's descriptor store, starting it at the first
// call; nil if it cannot start.
func (m *Manager) fdStore() *fdstore.Store {
	m.fdsOnce.Do(func() {
		st, err := fdstore.Start()
		if err != nil {
			m.log.Warn("workspaces hold their descriptors in the process's file table", "err", err)
			return
		}
		m.fds = st
	})
	return m.fds
}

// devPath is the path through which sandboxes bind the shared /dev (see
// devdir.go), empty if there is none.
func (m *Manager) devPath() string {
	if m.dev == nil {
		return ""
	}
	return procFD(m.dev)
}

// closeDev releases the shared /dev; the kernel frees it once no sandbox
// binds it.
func (m *Manager) closeDev() {
	if m.dev != nil {
		m.dev.Close()
		m.dev = nil
	}
}
