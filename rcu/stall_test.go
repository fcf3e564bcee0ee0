package rcu

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ukeys/ukeys/internal/invariants"
)

// stuckWorkerLoop is an online task that blocks without going offline: the
// bug that stall reports exist to find.
func stuckWorkerLoop(d *Domain, registered chan<- *Task, release <-chan struct{}) {
	t := d.Register("stuck-worker")
	registered <- t
	<-release
	t.Checkpoint()
	t.Unregister()
}

func TestStallReportNamesHoldingTask(t *testing.T) {
	const timeout = 20 * time.Millisecond
	reports := make(chan StallReport, 16)
	d := newDomain(t, WithName("stall-test"), WithStallTimeout(timeout),
		WithStallHandler(func(r StallReport) { reports <- r }))
	registered := make(chan *Task)
	release := make(chan struct{})
	exited := make(chan struct{})
	go func() { stuckWorkerLoop(d, registered, release); close(exited) }()
	receive(t, "registered", registered)
	done := syncAsync(d)

	first := receive(t, "reports", reports)
	if first.Domain != "stall-test" || first.Report != 1 || first.Age < timeout || first.Waiting != "tasks" {
		t.Fatalf("first report: %+v", first)
	}
	if len(first.Tasks) != 1 || first.Tasks[0].Name != "stuck-worker" {
		t.Fatalf("first report names tasks %+v, want only stuck-worker", first.Tasks)
	}
	if !strings.Contains(first.Tasks[0].Stack, "stuckWorkerLoop") {
		t.Fatalf("stack of the holding task does not show where it is:\n%s", first.Tasks[0].Stack)
	}
	if s := first.String(); !strings.Contains(s, `task "stuck-worker"`) || !strings.Contains(s, "stuckWorkerLoop") {
		t.Fatalf("rendered report lacks the task or its stack:\n%s", s)
	}
	second := receive(t, "reports", reports)
	if second.Report != 2 || second.Age < 3*timeout || second.GracePeriod != first.GracePeriod {
		t.Fatalf("second report: %+v (first at %v), want report 2 at 3x the timeout", second, first.Age)
	}

	close(release)
	if err := receive(t, "done", done); err != nil {
		t.Fatal(err)
	}
	receive(t, "exited", exited)
	stalls := d.Stats().Stalls
	time.Sleep(8 * timeout)
	for len(reports) > 0 {
		<-reports
	}
	if later := d.Stats().Stalls; later > stalls+1 { // one may have raced with the end
		t.Fatalf("stall reports continued after the grace period ended: %d then %d", stalls, later)
	}
	// A healthy grace period afterwards is not reported.
	if err := d.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func holdSectionInHolder(d *Domain, opened chan<- struct{}, release <-chan struct{}) {
	s := d.Read()
	close(opened)
	<-release
	s.End()
}

func TestStallReportCountsSections(t *testing.T) {
	reports := make(chan StallReport, 16)
	d := newDomain(t, WithStallTimeout(20*time.Millisecond),
		WithStallHandler(func(r StallReport) { reports <- r }))
	opened := make(chan struct{})
	release := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); holdSectionInHolder(d, opened, release) }()
	receive(t, "opened", opened)
	done := syncAsync(d)
	r := receive(t, "reports", reports)
	if r.Waiting != "read sections" || r.Sections != 1 || len(r.Tasks) != 0 {
		t.Fatalf("report: %+v, want one read section and no task", r)
	}
	if invariants.Enabled {
		if len(r.SectionGoroutines) != 1 || !strings.Contains(r.SectionGoroutines[0].Stack, "holdSectionInHolder") {
			t.Fatalf("section holders: %+v, want the holder's stack", r.SectionGoroutines)
		}
	}
	close(release)
	wg.Wait()
	if err := receive(t, "done", done); err != nil {
		t.Fatal(err)
	}
}

func TestDefaultStallHandlerLogs(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))
	d := newDomain(t, WithStallTimeout(10*time.Millisecond), WithLogger(logger))
	end := holdSection(d)
	done := syncAsync(d)
	eventually(t, "a stall report", func() bool { return d.Stats().Stalls > 0 })
	end()
	if err := receive(t, "done", done); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "grace period stalled") || !strings.Contains(out, "sections=1") {
		t.Fatalf("log output lacks the stall warning:\n%s", out)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestStallReportsOff(t *testing.T) {
	d := newDomain(t, WithStallTimeout(0), WithStallHandler(func(StallReport) {
		t.Error("stall report with reports turned off") // Error, not Fatal: the handler runs on the domain's goroutine
	}))
	end := holdSection(d)
	done := syncAsync(d)
	time.Sleep(20 * time.Millisecond)
	end()
	if err := receive(t, "done", done); err != nil {
		t.Fatal(err)
	}
}
