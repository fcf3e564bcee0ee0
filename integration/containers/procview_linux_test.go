package containers

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keyctl"
)

// Containers run by runc whose recipe binds ukeyd's /proc files
// (-proc-dir) over /proc/keys, /proc/key-users and
// /proc/sys/kernel/keys: each reads its own keys there, and neither
// another container's, nor the daemon's own store's, nor the host
// kernel's; its maxkeys is its namespace's, and its root may set it.
func TestRuncContainersSeeTheirOwnProcKeys(t *testing.T) {
	runc, gobin := runcAndGo(t)
	procDir := procDirIn(t, t.TempDir())
	dir, sock := agentDaemon(t, "-proc-dir", procDir)
	configure, run := runcBundle(t, runc, gobin, dir)
	wait := func(id string) { waitForContainer(t, runc, filepath.Join(dir, "runc"), id) }

	// A key in the daemon's own store, and one in the host kernel's.
	cl, err := client.Dial(filepath.Join(dir, "run", "ukeyd.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.AddKey("user", "key-of-the-daemons-store", []byte("v"), keyctl.SessionKeyring); err != nil {
		t.Fatal(err)
	}
	kernelKey, err := unix.AddKey("user", "key-of-the-host-kernel", []byte("v"), unix.KEY_SPEC_SESSION_KEYRING)
	if err == nil {
		defer unix.KeyctlInt(unix.KEYCTL_INVALIDATE, kernelKey, 0, 0, 0)
	}

	bind := func() { t.Helper(); bindProcFiles(t, filepath.Join(dir, "bundle"), procDir) }
	profile := notifyKeyCalls(sock)
	configure(profile, "proc", "key-of-a", "3")
	bind()
	var wg sync.WaitGroup
	var a string
	wg.Add(1)
	go func() { defer wg.Done(); a = run(id("proc-a")) }()
	wait(id("proc-a"))
	configure(profile, "proc", "key-of-b")
	bind()
	b := run(id("proc-b"))
	wg.Wait()

	for name, out := range map[string]string{"a": a, "b": b} {
		own, other := "key-of-"+name, map[string]string{"a": "key-of-b", "b": "key-of-a"}[name]
		if !strings.Contains(out, "/proc/keys: <nil>\n") || !strings.Contains(out, " user      "+own+": 1\n") {
			t.Errorf("container %s does not see its key in /proc/keys:\n%s", name, out)
		}
		for _, not := range []string{other, "key-of-the-daemons-store", "key-of-the-host-kernel"} {
			if strings.Contains(out, not) {
				t.Errorf("container %s sees %s:\n%s", name, not, out)
			}
		}
		lines := strings.Split(out, "\n")
		// Its namespace's maxkeys: the daemon's 200 (within a uid's
		// share of a container's, agent.Share).
		if i := slices.Index(lines, "/proc/sys/kernel/keys/maxkeys: <nil>"); i < 0 || i+1 >= len(lines) || lines[i+1] != "200" {
			t.Errorf("container %s's maxkeys:\n%s", name, out)
		}
		if !strings.HasSuffix(out, "write /proc/sys/kernel/keys/maxkeys: <nil>\n321") {
			t.Errorf("container %s's root setting its maxkeys:\n%s", name, out)
		}
	}
	// Possession counts, as the kernel's: a key only its possessor may
	// view is seen by the process whose process keyring holds it, and
	// not by its child, of the same uid in the same container.
	configure(profile, "possess", "key-of-c")
	bind()
	if c := run(id("proc-c")); c != "possess sees it: true <nil>\npeek sees it: false <nil>\n<nil>" {
		t.Errorf("a possessor-only key in /proc/keys, of its possessor and of its child:\n%s", c)
	}
	// The containers' writes were theirs: the daemon's own is as it was.
	if s, err := cl.Sysctl(); err != nil || !strings.Contains(s, "maxkeys = 200\n") {
		t.Errorf("the daemon's own tunables after the containers' writes: %v\n%s", err, s)
	}
	if got, err := os.ReadFile(filepath.Join(procDir, "keys")); err != nil || !strings.Contains(string(got), "key-of-the-daemons-store") {
		t.Errorf("a host process reading the files: %v\n%s", err, got)
	}
}

// procDirIn makes dir/proc, where a daemon's -proc-dir mounts the /proc
// files, or skips the test where there is no /dev/fuse. The mount is
// detached at the end: a daemon killed, not stopped, leaves it.
func procDirIn(t *testing.T, dir string) string {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("needs /dev/fuse, which the /proc files are served through")
	}
	procDir := filepath.Join(dir, "proc")
	if err := os.Mkdir(procDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(procDir, unix.MNT_DETACH) })
	return procDir
}

// procHooks is the recipe's createContainer hook for runc, which
// refuses a bind mount inside /proc in config.json's mounts (all but
// the few files LXCFS serves): runc runs it in the container's mount
// namespace, its working directory the container's root, before the
// root is pivoted to.
func procHooks(procDir string) map[string]any {
	script := "mount --bind " + procDir + "/keys proc/keys && " +
		"mount --bind " + procDir + "/key-users proc/key-users && " +
		"mount --bind " + procDir + "/sys/kernel/keys proc/sys/kernel/keys"
	return map[string]any{"createContainer": []map[string]any{{"path": "/bin/sh", "args": []string{"sh", "-c", script}}}}
}

// bindProcFiles makes the bundle's next containers bind the files in
// procDir over their /proc's (procHooks), with /proc/keys unmasked.
func bindProcFiles(t *testing.T, bundle, procDir string) {
	t.Helper()
	editConfig(t, bundle, func(c map[string]any) {
		c["hooks"] = procHooks(procDir)
		linux := c["linux"].(map[string]any)
		var masked []any
		for _, m := range linux["maskedPaths"].([]any) {
			if m != "/proc/keys" {
				masked = append(masked, m)
			}
		}
		linux["maskedPaths"] = masked
	})
}
