package server_test

import (
	"crypto/elliptic"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/ukeys/ukeys/internal/certtest"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/ukeystest"
	"github.com/ukeys/ukeys/wire"
)

func init() { testChildren["simple-call"] = simpleCallChild }

// simpleCallChild makes one cheap call and says how it went.
func simpleCallChild() {
	c := childDial()
	defer c.Close()
	r, err := rawCall(c, 1, wire.OpGetKeyringID, wire.Int(int64(keys.UserKeyring)), wire.Int(1))
	switch {
	case err != nil:
		fmt.Println("call:", err)
	case r.Errno != 0:
		fmt.Println("errno", r.Errno)
	default:
		fmt.Println("served")
	}
}

// The attack: a P-521 certificate whose self-signature is corrupted,
// added again and again on many connections. Each add_key is refused
// (EKEYREJECTED, no quota used) after ~3.5 ms of signature check, and
// eight connections of one uid held the daemon at 1.9 of its 2
// processors. Such calls are expensive operations, bounded as
// dh_compute is: one uid's run one at a time (MaxExpensivePerUID), and
// another uid is served while one of them runs. Before, no add_key went
// through the bound at all.
func TestCostlyAddKeyBounded(t *testing.T) {
	ukeystest.NeedRoot(t, "to serve a request of another uid while root's add_keys run")
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	d := ukeystest.NewDaemon(t, ukeystest.WithDirMode(0o755), ukeystest.WithConfig(server.Config{
		Limits: server.Limits{MaxExpensive: 2, MaxExpensivePerUID: 1},
	}))
	var (
		mu        sync.Mutex
		running   = map[uint32]int{}
		peak      = map[uint32]int{}
		ran       int
		entered   = make(chan struct{})
		release   = make(chan struct{})
		firstOnce sync.Once
	)
	server.SetExpensiveHook(d.Server, func(uid uint32, start bool) {
		mu.Lock()
		if !start {
			running[uid]--
			mu.Unlock()
			return
		}
		running[uid]++
		ran++
		peak[uid] = max(peak[uid], running[uid])
		mu.Unlock()
		// The first holds its slot until the test lets it go.
		firstOnce.Do(func() {
			close(entered)
			<-release
		})
	})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	cert := certtest.New(t, certtest.Options{CN: "flood", Curve: elliptic.P521()}, nil)
	bad := append([]byte(nil), cert.DER...)
	bad[len(bad)-1] ^= 0x55 // in the signature's last number

	const n = 8
	errnos := make(chan uint16, n)
	var wg sync.WaitGroup
	for range n {
		c, err := net.Dial("unix", d.Socket)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := hello(c); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			r, err := rawCall(c, 1, wire.OpAddKey, wire.Str("asymmetric"), wire.Str(""), wire.Bytes(bad), wire.Int(int64(keys.UserKeyring)))
			if err != nil {
				t.Error(err)
				errnos <- 0
				return
			}
			errnos <- r.Errno
		})
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	select {
	case <-entered:
	case <-allDone:
		t.Fatalf("%d add_keys of a certificate with a bad signature ran outside the bound of expensive operations (%d went through it)", n, ran)
	}
	// One of the uid's add_keys holds its slot: another uid is served.
	bin := filepath.Join(d.Dir, "child.test")
	ukeystest.CopyExecutable(t, os.Args[0], bin)
	cmd := exec.Command(setpriv, "--reuid=1732", "--regid=1732", "--clear-groups", bin)
	cmd.Env = []string{"UKEYS_SOCKET=" + d.Socket, "UKEYS_TEST_CHILD=simple-call"}
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "served" {
		t.Fatalf("another uid, while root's add_keys run: %v %s", err, out)
	}
	mu.Lock()
	held := running[0]
	mu.Unlock()
	if held != 1 {
		t.Fatalf("%d of root's add_keys were running at once, beyond its bound of 1", held)
	}
	close(release)
	<-allDone
	close(errnos)
	for e := range errnos {
		if e != uint16(syscall.EKEYREJECTED) {
			t.Errorf("an add_key of a certificate with a bad signature: errno %d, want EKEYREJECTED", e)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if ran != n || peak[0] != 1 {
		t.Fatalf("%d of %d add_keys went through the bound, at most %d at once for the uid (bound 1)", ran, n, peak[0])
	}
}
