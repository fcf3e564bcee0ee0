package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/server"
)

// metricsAddrOf returns the address the daemon says it serves metrics on.
func metricsAddrOf(t *testing.T, d *child) string {
	t.Helper()
	re := regexp.MustCompile(`msg="ukeyd: metrics" addr=(\S+)`)
	var addr string
	testutil.Eventually(t, "the daemon to say where its metrics are", func() bool {
		m := re.FindStringSubmatch(d.stderrText())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	return addr
}

// The attack: more keep-alive connections to the metrics endpoint than
// the daemon has descriptors, each with a scrape. Unbounded, they held
// every descriptor and the key socket's accept failed with EMFILE: its
// clients hung. Now the endpoint keeps at most server.MetricsConns of
// them and closes the rest as they come; the key socket accepts and
// serves.
func TestMetricsEndpointBounded(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "ukeyd.sock")
	d := startChild(t, socket, childOpts{env: []string{"UKEYD_TEST_NOFILE=256"}})
	addr := metricsAddrOf(t, d)
	const n = 300
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "GET /metrics HTTP/1.1\r\nHost: ukeyd\r\n\r\n")
	}
	// Each is answered, or closed; one neither (never accepted) is given
	// up on at a deadline that only the unbounded endpoint meets.
	answers := make(chan bool, n)
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range conns {
		go func() {
			c.SetReadDeadline(deadline)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err == nil {
				io.Copy(io.Discard, resp.Body) // and kept alive
				resp.Body.Close()
			}
			answers <- err == nil
		}()
	}
	answered := 0
	for range n {
		if <-answers {
			answered++
		}
	}
	served := make(chan error, 1)
	go func() {
		cl, err := client.Dial(socket)
		if err == nil {
			defer cl.Close()
			_, err = cl.Status()
		}
		served <- err
	}()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("the key socket, with %d connections made to the metrics endpoint: %v\n%s", n, err, d.stderrText())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the key socket did not serve with %d connections made to the metrics endpoint (%d of them served)", n, answered)
	}
	if answered > server.MetricsConns {
		t.Fatalf("%d of %d connections to the metrics endpoint were served; want at most %d, the rest closed", answered, n, server.MetricsConns)
	}
}

// -metrics unix:PATH serves the metrics on a socket only the daemon's
// user can connect to.
func TestMetricsOnAUnixSocket(t *testing.T) {
	dir := t.TempDir()
	socket, msock := filepath.Join(dir, "ukeyd.sock"), filepath.Join(dir, "metrics.sock")
	startChild(t, socket, childOpts{args: []string{"-metrics", "unix:" + msock}})
	st, err := os.Stat(msock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("the metrics socket's mode is %v, want a socket of mode 0600", st.Mode())
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", msock)
	}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://ukeyd/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "go_goroutines") {
		t.Fatalf("a scrape on the metrics socket: %s\n%.200s", resp.Status, body)
	}
}
