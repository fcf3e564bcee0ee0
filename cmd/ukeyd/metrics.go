package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ukeys/ukeys/server"
)

// The metrics endpoint is served where only its scraper can reach it, and
// bounded: open to every local user with no bound, keep-alive connections
// would take every descriptor of the daemon, so that its key socket's
// accept would fail with EMFILE, and pipelined gzip scrapes would take
// its processors (TestMetricsEndpointBounded). So:
//
//   - `-metrics unix:PATH` serves it on a Unix socket of mode 0600: only
//     the daemon's user (and root) can connect;
//   - on TCP, at most [server.MetricsConns] connections are open at once
//     (counted in the daemon's descriptor reserve); one more is closed
//     as soon as it is accepted;
//   - every connection has read, write and idle timeouts and a bound on
//     its request's header;
//   - one scrape runs at a time, and at most one a second: others are
//     answered 429 or 503 without rendering anything.

// Timeouts and bounds of the metrics endpoint's connections.
const (
	metricsReadTimeout  = 10 * time.Second
	metricsWriteTimeout = 10 * time.Second
	metricsIdleTimeout  = 30 * time.Second
	metricsMaxHeader    = 4 << 10
	metricsMinInterval  = time.Second // between two scrapes
)

// listenMetrics listens on addr: "unix:PATH" for a Unix socket of mode
// 0600 (a stale socket left at PATH is replaced, one that answers is
// not), anything else a TCP address. A TCP listener closes the
// connections beyond [server.MetricsConns].
func listenMetrics(addr string) (net.Listener, error) {
	path, ok := strings.CutPrefix(addr, "unix:")
	if !ok {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, err
		}
		return &boundedListener{Listener: ln, slots: make(chan struct{}, server.MetricsConns)}, nil
	}
	if path == "" {
		return nil, fmt.Errorf("no path in %q", addr)
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, 500*time.Millisecond); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s is in use", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	// Made 0600 from the start: the umask is the process's, and nothing
	// else of the daemon makes files at this moment of its start.
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return &boundedListener{Listener: ln, slots: make(chan struct{}, server.MetricsConns)}, nil
}

// metricsServer serves reg's /metrics with the endpoint's bounds.
func metricsServer(reg *prometheus.Registry, ready func() bool) *http.Server {
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{MaxRequestsInFlight: 1})
	mux := http.NewServeMux()
	spaced := &spacedHandler{h: h, every: metricsMinInterval}
	mux.Handle("/metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ready() {
			// Handed over (-after-handover wait): the keys are another
			// daemon's, and so are their figures.
			http.Error(w, "handed over", http.StatusServiceUnavailable)
			return
		}
		spaced.ServeHTTP(w, r)
	}))
	// A readiness probe's: 200 while this process serves the key socket,
	// 503 before and once it has handed over, so that a DaemonSet's
	// rolling update deletes the old pod only once the new one serves.
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if !ready() {
			http.Error(w, "not serving", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("serving\n"))
	})
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       metricsReadTimeout,
		WriteTimeout:      metricsWriteTimeout,
		IdleTimeout:       metricsIdleTimeout,
		MaxHeaderBytes:    metricsMaxHeader,
	}
}

// spacedHandler runs h at most once every so often; a request that comes
// sooner is answered 429 at once.
type spacedHandler struct {
	h     http.Handler
	every time.Duration
	mu    sync.Mutex
	last  time.Time
}

func (s *spacedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	s.mu.Lock()
	soon := !s.last.IsZero() && now.Sub(s.last) < s.every
	if !soon {
		s.last = now
	}
	s.mu.Unlock()
	if soon {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "scraped less than a second ago", http.StatusTooManyRequests)
		return
	}
	s.h.ServeHTTP(w, r)
}

// boundedListener lets at most cap(slots) of its connections be open at
// once: one accepted beyond them is closed at once, so that it holds no
// descriptor of the daemon's, and accepting goes on.
type boundedListener struct {
	net.Listener
	slots chan struct{}
}

func (l *boundedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &boundedConn{Conn: c, slots: l.slots}, nil
		default:
			c.Close()
		}
	}
}

// boundedConn gives its slot back when it is closed.
type boundedConn struct {
	net.Conn
	slots chan struct{}
	once  sync.Once
}

func (c *boundedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.slots })
	return err
}
