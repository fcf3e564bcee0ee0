package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ukeys/ukeys/agent"
	"github.com/ukeys/ukeys/intercept"
	"github.com/ukeys/ukeys/internal/endpoint"
	"github.com/ukeys/ukeys/internal/procs"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/procview"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/server/metrics"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run(args []string) int {
	fs := flag.NewFlagSet("ukeyd", flag.ContinueOnError)
	ev := &envs{}
	def := keys.DefaultTunables()
	socket := fs.String("socket", server.DefaultSocket(), "Unix socket to listen on (env UKEYS_SOCKET)")
	metricsAddr := fs.String("metrics", envOr("UKEYD_METRICS", ""), "address for a Prometheus /metrics endpoint: unix:PATH for a socket only the daemon's user can reach (mode 0600), or a TCP address, e.g. 127.0.0.1:9464, at most "+strconv.Itoa(server.MetricsConns)+" connections at once (env UKEYD_METRICS)")
	logLevel := fs.String("log-level", envOr("UKEYD_LOG_LEVEL", "info"), "debug, info, warn or error (env UKEYD_LOG_LEVEL)")
	gcDelay := fs.Duration("gc-delay", ev.duration("UKEYD_GC_DELAY", def.GCDelay), "how long expired and revoked keys stay linked (gc_delay; env UKEYD_GC_DELAY)")
	maxKeys := fs.Int("maxkeys", ev.int("UKEYD_MAXKEYS", def.MaxKeys), "keys per non-root user (env UKEYD_MAXKEYS)")
	maxBytes := fs.Int("maxbytes", ev.int("UKEYD_MAXBYTES", def.MaxBytes), "bytes per non-root user (env UKEYD_MAXBYTES)")
	rootKeys := fs.Int("root-maxkeys", ev.int("UKEYD_ROOT_MAXKEYS", def.RootMaxKeys), "keys for root (env UKEYD_ROOT_MAXKEYS)")
	rootBytes := fs.Int("root-maxbytes", ev.int("UKEYD_ROOT_MAXBYTES", def.RootMaxBytes), "bytes for root (env UKEYD_ROOT_MAXBYTES)")
	persist := fs.Duration("persistent-expiry", ev.duration("UKEYD_PERSISTENT_EXPIRY", def.PersistentExpiry), "persistent keyring timeout (env UKEYD_PERSISTENT_EXPIRY)")
	helper := fs.String("request-key", envOr("UKEYD_REQUEST_KEY", defaultHelper()), "request-key helper command run to construct keys (env UKEYD_REQUEST_KEY; empty: none)")
	upcallTimeout := fs.Duration("upcall-timeout", ev.duration("UKEYD_UPCALL_TIMEOUT", keys.DefaultUpcallTimeout), "kill a request-key helper after this long and negate the key (env UKEYD_UPCALL_TIMEOUT)")
	helperIntercept := fs.Bool("request-key-intercept", envBool("UKEYD_REQUEST_KEY_INTERCEPT", true), "run the request-key helper under ukeyctl run, so that its own key system calls (the stock /sbin/request-key, request-key.conf's keyctl lines) act on ukeys with the upcall's authority, where seccomp user notification is to be had (env UKEYD_REQUEST_KEY_INTERCEPT)")
	trustedDir := fs.String("trusted-certs", envOr("UKEYD_TRUSTED_CERTS", ""), "directory of X.509 certificates (DER or PEM, *.der, *.crt, *.pem) loaded at start into .builtin_trusted_keys, which the asymmetric restrictions builtin_trusted and builtin_and_secondary_trusted trust (env UKEYD_TRUSTED_CERTS; empty: none)")
	agentPath := fs.String("seccomp-agent", envOr("UKEYD_SECCOMP_AGENT", ""), "also serve container runtimes as an OCI seccomp agent on this Unix socket (linux.seccomp.listenerPath), each container a key namespace of its own (env UKEYD_SECCOMP_AGENT)")
	procDir := fs.String("proc-dir", envOr("UKEYD_PROC_DIR", ""), "serve a key namespace's own /proc/keys, /proc/key-users and /proc/sys/kernel/keys/* through FUSE in this directory, for containers to bind over the kernel's: each reader sees its container's keys (the seccomp agent's), a host process the daemon's; unmounted on exit, and left to the new daemon at a hand-over (env UKEYD_PROC_DIR)")
	takeoverMode := takeoverFlag(envOr("UKEYD_TAKEOVER", "false"))
	if err := takeoverMode.Set(string(takeoverMode)); err != nil {
		ev.bad = append(ev.bad, "UKEYD_TAKEOVER="+strconv.Quote(string(takeoverMode))+": "+err.Error())
		takeoverMode = "false"
	}
	fs.Var(&takeoverMode, "takeover", "take over from the ukeyd serving -socket (an upgrade): its listening socket, its clients' connections, every key, session and process record, with no client refused; it exits once this one serves, and serves on if this one fails; auto: take over if a daemon serves -socket, start afresh if none does or from what systemd passed, as a DaemonSet's new pod beside the old one needs (env UKEYD_TAKEOVER)")
	afterHandover := fs.String("after-handover", envOr("UKEYD_AFTER_HANDOVER", "exit"), "what the daemon does once another has taken over from it: exit (0), or wait, serving nothing (its /readyz answers 503), until SIGTERM or SIGINT, so that a container whose restart policy is Always is not started again to take back over (env UKEYD_AFTER_HANDOVER)")
	fdstoreState := fs.Bool("fdstore-state", envBool("UKEYD_FDSTORE_STATE", false), "under systemd, on SIGTERM keep every key, record and connection in systemd's file-descriptor store (a sealed memfd beside the descriptors; FileDescriptorStoreMax must hold them), so that a restart loses nothing; the next daemon takes them back (env UKEYD_FDSTORE_STATE)")
	detach := fs.Bool("detach", false, "with -takeover: start the new daemon in the background and exit once it has taken over (0) or failed (1), as systemd's ExecReload needs")
	logins := fs.Bool("login-sessions", envBool("UKEYD_LOGIN_SESSIONS", true), "give a process that has no session keyring of its own its login's (one per uid and audit or POSIX session, made on first use), as pam_keyinit gives each login one; false keeps the kernel's fallback to the user-session keyring (env UKEYD_LOGIN_SESSIONS)")
	lim := server.DefaultLimits(server.NoFile())
	memLimit := fs.String("memory-limit", envOr("UKEYD_MEMORY_LIMIT", "auto"), "soft limit on the daemon's Go heap (GOMEMLIMIT): auto (twice root's quota, at 256 bytes a key beyond its quota bytes, and 64 MiB; unless GOMEMLIMIT is set), off, or a size such as 512MiB (env UKEYD_MEMORY_LIMIT)")
	procsFlag := fs.String("procs", envOr("UKEYD_PROCS", "auto"), "Go processors (GOMAXPROCS): auto (one more than the processors the daemon may use, so that the kernel, not Go's 10 ms slices, shares them between busy requests and the key collector; Go's default under a CPU quota or when GOMAXPROCS is set), go (Go's default), or a count (env UKEYD_PROCS)")
	maxConns := fs.Int("max-conns-per-uid", ev.int("UKEYD_MAX_CONNS_PER_UID", lim.MaxConnsPerUID), "connections one uid may hold open (env UKEYD_MAX_CONNS_PER_UID; the defaults of the -max-* flags derive from the descriptor limit)")
	maxProcs := fs.Int("max-procs-per-uid", ev.int("UKEYD_MAX_PROCS_PER_UID", lim.MaxProcsPerUID), "client processes of one uid the daemon keeps keyrings for (env UKEYD_MAX_PROCS_PER_UID)")
	lockMode := fs.String("lock-memory", envOr("UKEYD_LOCK_MEMORY", "auto"), "keep payloads out of swap: all (lock the whole process, mlockall; needs CAP_IPC_LOCK or RLIMIT_MEMLOCK unlimited, or the daemon does not start), arena (lock only the arena of payloads and the buffers they cross, up to RLIMIT_MEMLOCK), auto (all where it may, arena otherwise) or off (env UKEYD_LOCK_MEMORY)")
	maxBuf := fs.Int("max-buffer-per-uid", ev.int("UKEYD_MAX_BUFFER_PER_UID", lim.MaxBufferedPerUID), "bytes of large requests and answers one uid may have in flight (env UKEYD_MAX_BUFFER_PER_UID)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		// Such as "-takeover auto", which is -takeover and a word: the
		// boolean form takes no separate value.
		ev.bad = append(ev.bad, fmt.Sprintf("unexpected argument %q (-takeover=auto, not -takeover auto)", fs.Arg(0)))
	}
	if *afterHandover != "exit" && *afterHandover != "wait" {
		ev.bad = append(ev.bad, fmt.Sprintf("-after-handover %q: not exit or wait", *afterHandover))
	}
	var takeoverBool bool
	takeover := &takeoverBool
	if *detach {
		if takeoverMode == "false" {
			fmt.Fprintln(os.Stderr, "ukeyd: -detach goes with -takeover")
			return 2
		}
		return detached()
	}
	for name, v := range map[string]int{"-max-conns-per-uid": *maxConns, "-max-procs-per-uid": *maxProcs, "-max-buffer-per-uid": *maxBuf} {
		if v < 1 {
			ev.bad = append(ev.bad, fmt.Sprintf("%s %d: must be at least 1", name, v))
		}
	}
	ml, err := parseMemoryLimit(*memLimit)
	if err != nil {
		ev.bad = append(ev.bad, "-memory-limit "+err.Error())
	}
	procSet, err := procs.Parse(*procsFlag)
	if err != nil {
		ev.bad = append(ev.bad, "-procs "+err.Error())
	}
	if !slices.Contains(lockModes, *lockMode) {
		ev.bad = append(ev.bad, fmt.Sprintf("-lock-memory %q: not one of %s", *lockMode, strings.Join(lockModes, ", ")))
	}
	if len(ev.bad) > 0 {
		slices.Sort(ev.bad)
		fmt.Fprintf(os.Stderr, "ukeyd: %s\n", strings.Join(ev.bad, "; "))
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "ukeyd: bad -log-level %q\n", *logLevel)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	// A take-over, or -takeover auto's look at the socket and what it
	// leads to, one daemon at a time until it serves.
	releaseStart := func() {}
	if takeoverMode != "false" {
		if releaseStart, err = lockStart(*socket, log); err != nil {
			log.Error("ukeyd: cannot start", "socket", *socket, "err", err)
			return 1
		}
		defer func() { releaseStart() }()
	}
	*takeover = takeoverMode == "true" || takeoverMode == "auto" && !systemdPassed() && serving(*socket)
	if takeoverMode == "auto" {
		log.Info("ukeyd: -takeover auto", "socket", *socket, "daemon_serving", *takeover, "systemd_passed", systemdPassed())
	}
	gomaxprocs := procSet.Apply()
	log.Debug("ukeyd: Go processors", "setting", procSet.String(), "gomaxprocs", gomaxprocs)

	// Hardening that needs no option: no core dumps or ptrace by other
	// users of this process's memory, which holds every payload.
	if err := noDumps(); err != nil {
		log.Warn("ukeyd: cannot make the process non-dumpable", "err", err)
	}
	// Before any payload is held: out of swap.
	if err := lockMemory(*lockMode, log); err != nil {
		fmt.Fprintf(os.Stderr, "ukeyd: %v\n", err)
		return 2
	}

	tun := keys.Tunables{GCDelay: *gcDelay, MaxKeys: *maxKeys, MaxBytes: *maxBytes,
		RootMaxKeys: *rootKeys, RootMaxBytes: *rootBytes, PersistentExpiry: *persist}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg)

	// The Service needs its upcaller and the Server its Service: the
	// Helper goes to both, and server.New binds it.
	var upcaller keys.Upcaller
	var helperProg *server.Helper
	if f := strings.Fields(*helper); len(f) > 0 {
		helperProg = &server.Helper{Path: f[0], Args: f[1:], Socket: *socket}
		if runner := sibling("ukeyctl"); *helperIntercept && runner != "" && intercept.Available() {
			helperProg.Intercept = runner
		}
		upcaller = helperProg
	}
	keyOpts := []keys.Option{keys.WithUpcall(upcaller), keys.WithUpcallTimeout(*upcallTimeout)}
	if hook := ml.start(log); hook != nil {
		keyOpts = append(keyOpts, keys.WithTunablesChanged(hook))
	}
	lim.MaxConnsPerUID, lim.MaxProcsPerUID, lim.MaxBufferedPerUID = *maxConns, *maxProcs, *maxBuf
	var containers agent.Bounds
	if *agentPath != "" {
		// The containers' processes and listeners (a descriptor or more
		// each) come out of the host's bound, so that both together
		// stay within the descriptor limit DefaultLimits splits.
		containers.Procs = max(lim.MaxProcs/2, 2)
		lim.MaxProcs -= containers.Procs
		lim.MaxProcsPerUID = min(lim.MaxProcsPerUID, lim.MaxProcs)
	}
	// The agent's containers' expensive operations take the daemon's
	// slots.
	var ag *agent.Agent
	heavy := server.NewSlots(lim.MaxExpensive)
	cfg := server.Config{Logger: log, Metrics: m, Limits: lim, Helper: helperProg, NoLogins: !*logins, Expensive: heavy,
		BeforeTakeover: func() { notify(fmt.Sprintf("MAINPID=%d", os.Getpid())) }}
	if *agentPath != "" {
		// Each container's namespace has the daemon's tunables and
		// bounds, within its share of what the containers together may
		// hold (agent.Bounds). It is made before the daemon takes over
		// or thaws: its containers come with the daemon's state, in a
		// section of their own.
		ag = agent.New(agent.Config{Logger: log,
			Keys:   []keys.Option{keys.WithTunables(tun), keys.WithUpcallTimeout(*upcallTimeout)},
			Server: server.Config{Logger: log, Limits: lim, Expensive: heavy}, Bounds: containers})
		// Its namespaces are in the status of callers as privileged
		// as the daemon, and in the metrics.
		cfg.Namespaces = ag.Namespaces
	}
	var svc *keys.Service
	var srv *server.Server
	// The /proc files go with the agent's containers in the daemon's
	// section of a hand-over (extra.go): the same FUSE connection, so
	// that the containers' bind mounts of them live on.
	var pv *procview.Server
	x := &extra{ag: ag, pv: &pv, log: log}
	if ag != nil || *procDir != "" {
		cfg.HandOverExtra = x.handOver
	}
	// Read whatever the daemon before handed over, even with neither:
	// files not served here are let go of (extra.files), not left
	// mounted with their connection gone.
	cfg.TakeOverExtra = x.takeOver
	var lns []*net.UnixListener
	activated := false // the listening sockets came from systemd
	if *takeover {
		// Everything comes from the daemon serving the socket now: its
		// keys (with the tunables in force there, sysctl's changes
		// included), its processes and sessions, its listener and its
		// clients' connections.
		keys.SetBigKeyFileLimit(lim.BigKeyFiles)
		start := time.Now()
		res, err := server.TakeOver(*socket, keyOpts, cfg)
		if err != nil {
			log.Error("ukeyd: cannot take over; the running daemon serves on", "socket", *socket, "err", err)
			return 1
		}
		svc, srv, lns = res.Service, res.Server, res.Listeners
		log.Info("ukeyd: took over", "socket", *socket, "keys", res.Keys, "processes", res.Procs,
			"connections", res.Conns, "took", time.Since(start).String())
	} else {
		// What systemd passed: the listening sockets, and perhaps what
		// the daemon it stopped for a restart kept (-fdstore-state).
		sl, state, kept, err := systemdFiles()
		if err != nil {
			log.Error("ukeyd: the descriptors systemd passed", "err", err)
			return 1
		}
		lns, activated = sl, len(sl) > 0
		if state != nil {
			keys.SetBigKeyFileLimit(lim.BigKeyFiles)
			start := time.Now()
			previous, err := thawFromSystemd(state, kept, func(f io.Reader, kept []int) error {
				res, err := server.Thaw(f, kept, keyOpts, cfg)
				if err != nil {
					return err
				}
				svc, srv = res.Service, res.Server
				log.Info("ukeyd: back from a restart with what systemd kept", "keys", res.Keys, "processes", res.Procs,
					"connections", res.Conns, "took", time.Since(start).String())
				return nil
			})
			if previous {
				log.Warn("ukeyd: what systemd kept was in the previous daemon's format (in the clear, not sealed against writes): taken back once, and wiped")
			}
			if err != nil {
				log.Error("ukeyd: what the stopped daemon kept in systemd's store is lost; starting afresh", "err", err)
			}
		}
		if svc == nil {
			svc = keys.New(keyOpts...)
			if err := svc.SetTunables(tun); err != nil {
				fmt.Fprintln(os.Stderr, "ukeyd: a tunable is out of range")
				svc.Close()
				return 2
			}
		}
	}
	// The system keyrings exist from the start, as the kernel's do.
	if _, err := svc.SecondaryTrustedKeyring(); err != nil {
		fmt.Fprintf(os.Stderr, "ukeyd: trusted keyrings: %v\n", err)
		svc.Close()
		return 2
	}
	if *trustedDir != "" && !*takeover {
		n, err := loadTrusted(svc, *trustedDir)
		if err != nil {
			fmt.Fprintf(os.Stderr, "ukeyd: trusted certificates: %v\n", err)
			svc.Close()
			return 2
		}
		log.Info("ukeyd: built-in trusted keys loaded", "dir", *trustedDir, "certificates", n)
	} else if *trustedDir != "" {
		log.Info("ukeyd: the built-in trusted keys were handed over; -trusted-certs is read at a fresh start only")
	}
	keys.SetBigKeyFileLimit(lim.BigKeyFiles)
	if srv == nil {
		srv = server.New(svc, cfg)
	}
	if activated {
		log.Info("ukeyd: serving the sockets systemd passed", "sockets", len(lns))
	} else if len(lns) == 0 {
		ln, err := server.Listen(*socket)
		if err != nil {
			log.Error("ukeyd: cannot listen", "socket", *socket, "err", err)
			return 1
		}
		lns = append(lns, ln)
	}
	m.RegisterService(reg, svc)
	m.RegisterServer(reg, srv)
	if ag != nil {
		m.RegisterNamespaces(reg, ag.Namespaces)
	}
	ln := lns[0]
	var hs *http.Server
	var ready atomic.Bool // this process serves: its /readyz answers 200
	if *metricsAddr != "" {
		mln, err := listenMetrics(*metricsAddr)
		if err != nil {
			log.Error("ukeyd: cannot listen for metrics", "addr", *metricsAddr, "err", err)
			ln.Close()
			return 1
		}
		hs = metricsServer(reg, ready.Load)
		go hs.Serve(mln)
		log.Info("ukeyd: metrics", "addr", mln.Addr().String())
	}
	log.Info("ukeyd: listening", "socket", *socket, "pid", os.Getpid(),
		"max_conns", lim.MaxConns, "max_conns_per_uid", lim.MaxConnsPerUID,
		"max_procs", lim.MaxProcs, "max_procs_per_uid", lim.MaxProcsPerUID,
		"max_buffer_per_uid", lim.MaxBufferedPerUID, "big_key_files", lim.BigKeyFiles,
		"scope", endpoint.Scope(os.Geteuid()))
	if os.Geteuid() != 0 {
		// Said plainly: keys shared between users (chown, group and other
		// permissions, persistent keyrings) need the one store.
		log.Info("ukeyd: this daemon holds only uid " + strconv.Itoa(os.Geteuid()) + "'s keys; " +
			"one run by root (on " + endpoint.System() + ") serves every user of the host in one store")
	}

	agentDone := make(chan error, 1)
	if ag != nil {
		// The socket the daemon before this one served, handed over
		// with its containers (runtimes waited in its backlog), or a
		// new one.
		var aln *net.UnixListener
		if taken := ag.Listeners(); len(taken) > 0 {
			aln = taken[0]
			for _, extra := range taken[1:] {
				go ag.Serve(extra)
			}
		} else {
			var err error
			aln, err = server.Listen(*agentPath)
			for wait := time.Now().Add(5 * time.Second); *takeover && errors.Is(err, server.ErrInUse) && time.Now().Before(wait); {
				// A daemon taken over from that did not hand its socket
				// over lets go of it as it exits.
				time.Sleep(20 * time.Millisecond)
				aln, err = server.Listen(*agentPath)
			}
			if err != nil {
				log.Error("ukeyd: cannot listen for container runtimes", "socket", *agentPath, "err", err)
				ln.Close()
				return 1
			}
		}
		ctr, uid := agent.Share(ag.Bounds())
		b := ag.Bounds()
		log.Info("ukeyd: the containers' bounds (all together / each container / each uid in one)",
			"procs", fmt.Sprintf("%d/%d/%d", b.Procs, ctr.Procs, uid.Procs),
			"big_key_files", fmt.Sprintf("%d/%d/%d", b.BigKeyFiles, ctr.BigKeyFiles, uid.BigKeyFiles),
			"keys", fmt.Sprintf("%d/%d/%d", b.Keys, ctr.Keys, uid.Keys),
			"bytes", fmt.Sprintf("%d/%d/%d", b.Bytes, ctr.Bytes, uid.Bytes))
		go func() { agentDone <- ag.Serve(aln) }()
		log.Info("ukeyd: seccomp agent for container runtimes", "socket", *agentPath)
	}

	// The /proc files are unmounted when the daemon stops; at a
	// hand-over the new daemon serves them on (procview.TakeOver), or,
	// if this one did not hand them over, puts its own in their place
	// (procview.Mount), and these go with this process.
	absProc := ""
	if *procDir != "" {
		absProc, _ = filepath.Abs(*procDir)
	}
	pcfg := procConfig(ag, svc, srv, log)
	if pv = x.files(absProc, pcfg); pv != nil {
		log.Info("ukeyd: the /proc files of key namespaces, handed over", "dir", *procDir)
	} else if *procDir != "" {
		if pv, err = procview.Mount(*procDir, pcfg); err != nil {
			log.Error("ukeyd: cannot mount the /proc files", "dir", *procDir, "err", err)
			ln.Close()
			return 1
		}
		log.Info("ukeyd: the /proc files of key namespaces", "dir", *procDir)
	}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	served := make(chan error, len(lns))
	for _, l := range lns {
		go func() { served <- srv.Serve(l) }()
	}
	if !activated && !*takeover {
		if err := storeListener(ln); err != nil {
			log.Warn("ukeyd: cannot keep the socket in systemd's file-descriptor store", "err", err)
		}
	}
	releaseStart()
	releaseStart = func() {}
	notify("READY=1")
	readyFD()
	ready.Store(true)
	handedOver := func(what string, mayWait bool) int {
		ready.Store(false)
		// Another daemon serves the socket and every connection now:
		// nothing is shut down, and the process exits.
		if ag != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			ag.Shutdown(ctx)
			cancel()
			<-agentDone
		}
		// The keys are the new daemon's: this one's copies were released
		// at the hand-over, and the collector wipes them (and closes big
		// keys' files) before the process goes.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		svc.WaitGC(ctx)
		cancel()
		svc.Close()
		if mayWait && *afterHandover == "wait" {
			// A pod's container that exited would be started again by
			// its kubelet, and take back over; this one stays, unready,
			// until its pod is deleted.
			log.Info("ukeyd: " + what + "; serving nothing, waiting for SIGTERM (-after-handover wait)")
			for sig := range sigs {
				if sig != syscall.SIGHUP {
					break
				}
			}
		}
		if hs != nil {
			hs.Close()
		}
		log.Info("ukeyd: " + what + "; exiting")
		return 0
	}
	for {
		select {
		case <-srv.HandedOver():
			return handedOver("handed over to a new daemon", true)
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				log.Info("ukeyd: SIGHUP: nothing to reload; the request-key helper reads its configuration at every upcall")
				continue
			}
			if *fdstoreState && sig == syscall.SIGTERM && os.Getenv("NOTIFY_SOCKET") != "" {
				// systemd stops the daemon (perhaps to start it again):
				// everything goes to its file-descriptor store, for the
				// next daemon (thawFromSystemd).
				start := time.Now()
				if err := freezeToSystemd(srv); err != nil {
					log.Warn("ukeyd: cannot keep the keys in systemd's store; stopping without", "err", err)
				} else {
					log.Info("ukeyd: keys and connections kept in systemd's store for the next start", "took", time.Since(start).String())
					notify("STOPPING=1")
					return handedOver("everything kept in systemd's store", false)
				}
			}
			log.Info("ukeyd: stopping", "signal", sig.String())
			if pv != nil {
				pv.Close()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := srv.Shutdown(ctx)
			if ag != nil {
				if aerr := ag.Shutdown(ctx); err == nil {
					err = aerr
				}
				<-agentDone
			}
			cancel()
			if hs != nil {
				hs.Close()
			}
			<-served
			svc.Close()
			if err != nil {
				log.Warn("ukeyd: connections forced closed", "err", err)
			}
			log.Info("ukeyd: stopped")
			return 0
		case err := <-served:
			if errors.Is(err, server.ErrHandedOver) {
				return handedOver("handed over to a new daemon", true)
			}
			if !errors.Is(err, server.ErrClosed) {
				log.Error("ukeyd: serve", "err", err)
				return 1
			}
			return 0
		}
	}
}

// sibling returns the program name next to this binary, if it is there.
func sibling(name string) string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	p := filepath.Join(filepath.Dir(exe), name)
	if _, err := exec.LookPath(p); err != nil {
		return ""
	}
	return p
}

// envBool returns the boolean in the environment variable name, or def.
func envBool(name string, def bool) bool {
	switch os.Getenv(name) {
	case "":
		return def
	case "0", "false", "no":
		return false
	}
	return true
}

// defaultHelper is "ukeyctl request-key" next to this binary, if there.
func defaultHelper() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	p := filepath.Join(filepath.Dir(exe), "ukeyctl")
	if _, err := exec.LookPath(p); err != nil {
		return ""
	}
	return p + " request-key"
}

// envs reads the UKEYD_* variables that give flags their defaults, and
// remembers each value it cannot parse, so that a typo stops the daemon
// with a message instead of quietly leaving a default in force.
type envs struct{ bad []string }

func (e *envs) int(name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		e.bad = append(e.bad, fmt.Sprintf("%s=%q is not an integer", name, s))
		return def
	}
	return v
}

func (e *envs) duration(name string, def time.Duration) time.Duration {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		e.bad = append(e.bad, fmt.Sprintf("%s=%q is not a duration (such as 30s or 5m)", name, s))
		return def
	}
	return d
}

// takeoverFlag is -takeover's value: true, false or auto. Written alone
// (-takeover) it is true, as when it was a boolean flag.
type takeoverFlag string

func (f *takeoverFlag) String() string { return string(*f) }

func (f *takeoverFlag) IsBoolFlag() bool { return true }

func (f *takeoverFlag) Set(v string) error {
	switch v {
	case "auto":
		*f = "auto"
		return nil
	case "", "0", "false", "no":
		*f = "false"
		return nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil && v != "1" && v != "yes" {
		return errors.New("not true, false or auto")
	}
	*f = takeoverFlag(strconv.FormatBool(b || err != nil))
	return nil
}

// systemdPassed reports whether systemd started this process with
// descriptors (socket activation, or its store after a stop): the
// daemon then starts from them. A socket that systemd holds accepts
// connections with no daemon behind it, so -takeover auto must not read
// an accepted connection as a daemon to take over from.
func systemdPassed() bool {
	n, err := strconv.Atoi(os.Getenv("LISTEN_FDS"))
	return err == nil && n > 0 && os.Getenv("LISTEN_PID") == strconv.Itoa(os.Getpid())
}

// serving reports whether a daemon answers on socket: -takeover auto
// takes over from it if so. A socket file left by a daemon that died
// refuses the connection, and the daemon starts afresh on it.
func serving(socket string) bool {
	c, err := net.DialTimeout("unix", socket, 2*time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
