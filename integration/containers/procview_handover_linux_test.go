package containers

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/internal/testutil"
)

// The /proc files go with the daemon's upgrades: two runc containers
// whose /proc/keys and /proc/sys/kernel/keys are binds of ukeyd's files
// (-proc-dir) read them in a loop as fast as they can while the daemon
// is taken over (ukeyd -takeover) and then restarted through systemd's
// file-descriptor store, and no read fails (a bind of a mount whose
// FUSE connection died reads ENOTCONN): the new daemons serve the same
// connection. After each switch each container adds a key, and sees it
// in its /proc/keys, and never the other's.
func TestRuncProcFilesAcrossUpgrades(t *testing.T) {
	runc, gobin := runcAndGo(t)
	dir := t.TempDir()
	procDir := procDirIn(t, dir)
	agentSock, u := startRuncUpgrade(t, dir, "-proc-dir", procDir)

	configure, _ := runcBundle(t, runc, gobin, dir)
	bundle := filepath.Join(dir, "bundle")
	rootfs := filepath.Join(bundle, "rootfs")
	root := filepath.Join(dir, "runc")
	start := func(name string, args ...string) (*exec.Cmd, *testutil.Buffer) {
		configure(notifyKeyCalls(agentSock), args...)
		bindProcFiles(t, bundle, procDir)
		return startContainer(t, runc, root, bundle, name, "--no-new-keyring")
	}
	a, aOut := start("procloop-a", "procloop", "key-of-a", "key-of-b")
	b, bOut := start("procloop-b", "procloop", "key-of-b", "key-of-a")
	// mark tells the containers a switch is done, and waits until each
	// sees the key it adds then.
	mark := func(n int) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(rootfs, "switch-"+strconv.Itoa(n)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(30 * time.Second); !strings.Contains(aOut.String(), "sees key-of-a-"+strconv.Itoa(n)+"\n") ||
			!strings.Contains(bOut.String(), "sees key-of-b-"+strconv.Itoa(n)+"\n"); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				// What the containers read, said once they stop.
				os.WriteFile(filepath.Join(rootfs, "stop"), nil, 0o644)
				a.Wait()
				b.Wait()
				t.Fatalf("after switch %d the containers do not see the keys they added:\na:\n%s\nb:\n%s", n, aOut, bOut)
			}
		}
	}
	testutil.Eventually(t, "the containers to add their keys", func() bool {
		return strings.Contains(aOut.String(), "add ok") && strings.Contains(bOut.String(), "add ok")
	})
	time.Sleep(time.Second)

	// The take-over, as ExecReload runs it.
	u.takeOver(t)
	t.Logf("take-over: %s", tookLine(u.second.log.String(), "took over"))
	if !strings.Contains(u.second.log.String(), "the /proc files of key namespaces, handed over") {
		t.Errorf("the new daemon did not serve the /proc files handed over:\n%s", u.second.log)
	}
	mark(1)
	time.Sleep(time.Second)

	// systemd stops it for a restart: the files' connection goes to the
	// store with the rest, and the next daemon serves it on.
	u.restartThroughStore(t)
	t.Logf("freeze: %s", tookLine(u.second.log.String(), "kept in systemd's store"))
	t.Logf("thaw: %s", tookLine(u.third.log.String(), "back from a restart"))
	if !strings.Contains(u.third.log.String(), "the /proc files of key namespaces, handed over") {
		t.Errorf("the restarted daemon did not serve the /proc files it kept:\n%s", u.third.log)
	}
	mark(2)
	time.Sleep(time.Second)

	if err := os.WriteFile(filepath.Join(rootfs, "stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a.Wait()
	b.Wait()
	phase := regexp.MustCompile(`phase (\d) reads (\d+) failures (\d+) slowest (\S+) first (.*)`)
	for name, out := range map[string]string{"a": aOut.String(), "b": bOut.String()} {
		ms := phase.FindAllStringSubmatch(out, -1)
		if len(ms) != 3 || !strings.HasSuffix(out, "procloop done\n") {
			t.Errorf("container %s said:\n%s", name, out)
			continue
		}
		for i, m := range ms {
			t.Logf("container %s, %s: %s reads, %s failed, the slowest %s", name,
				[]string{"before and across the take-over", "after it and across the restart", "after the restart"}[i], m[2], m[3], m[4])
			if reads, _ := strconv.Atoi(m[2]); reads < 100 || m[3] != "0" {
				t.Errorf("container %s's phase %s: %s reads, %s failed, the first %s", name, m[1], m[2], m[3], m[5])
			}
		}
	}
	if pv := filepath.Join(procDir, "keys"); t.Failed() {
		got, err := os.ReadFile(pv)
		t.Logf("the host's %s: %v\n%s\nthe last daemon's log:\n%s", pv, err, got, u.third.log)
	}
	u.stop(t)
	var st unix.Statfs_t
	if err := unix.Statfs(procDir, &st); err == nil && st.Type == unix.FUSE_SUPER_MAGIC {
		t.Error("the /proc files are still mounted after the last daemon stopped")
	}
}
