package workqueue

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ukeys/ukeys/internal/testutil"
)

func TestWatchdogReportsLongItem(t *testing.T) {
	const threshold = 20 * time.Millisecond
	reports := make(chan WatchdogReport, 16)
	q, _ := newQueue(t, WithName("wd"), WithWorkers(2), WithWatchdog(threshold),
		WithWatchdogHandler(func(r WatchdogReport) { reports <- r }))
	b := newBlocker()
	q.Schedule(NewWork("stuck", b.run))
	receive(t, "the item to start", b.started)

	for n := 1; n <= 2; n++ {
		r := receive(t, "a watchdog report", reports)
		if r.Queue != "wd" || r.Work != "stuck" || r.Report != n {
			t.Fatalf("report %d: %+v", n, r)
		}
		// Reports are due at 1×, then 3× the threshold: intervals double.
		if min := threshold * time.Duration(1<<n-1); r.Running < min {
			t.Fatalf("report %d after %v of running, want at least %v", n, r.Running, min)
		}
		if !strings.Contains(r.Stack, "(*blocker).run") {
			t.Fatalf("report %d: stack does not show the item's function:\n%s", n, r.Stack)
		}
		if !strings.Contains(r.String(), `work "stuck" has been running`) {
			t.Fatalf("report text: %s", r)
		}
	}
	b.open()
	q.Close()
	if s := q.Stats(); s.WatchdogReports < 2 {
		t.Fatalf("WatchdogReports = %d, want at least 2", s.WatchdogReports)
	}
}

func TestWatchdogQuietForShortItems(t *testing.T) {
	// The items take well under a millisecond; the threshold is generous
	// so that a descheduled worker on a loaded machine is not a false alarm.
	reports := make(chan WatchdogReport, 16)
	q, _ := newQueue(t, WithWorkers(2), WithWatchdog(500*time.Millisecond),
		WithWatchdogHandler(func(r WatchdogReport) { reports <- r }))
	for i := range 50 {
		q.Schedule(NewWork("short", func() { time.Sleep(time.Duration(i%3) * 100 * time.Microsecond) }))
	}
	q.Close()
	select {
	case r := <-reports:
		t.Fatalf("watchdog reported a short item: %s", r)
	default:
	}
	if s := q.Stats(); s.WatchdogReports != 0 {
		t.Fatalf("WatchdogReports = %d, want 0", s.WatchdogReports)
	}
}

func TestWatchdogDefaultHandlerLogs(t *testing.T) {
	out := &testutil.Buffer{}
	logger := slog.New(slog.NewTextHandler(out, nil))
	q, _ := newQueue(t, WithName("logged"), WithWorkers(1), WithWatchdog(10*time.Millisecond), WithLogger(logger))
	b := newBlocker()
	q.Schedule(NewWork("slow-item", b.run))
	receive(t, "the item to start", b.started)
	eventually(t, "a report", func() bool { return q.Stats().WatchdogReports > 0 })
	b.open()
	q.Close()
	log := out.String()
	for _, want := range []string{"work item running too long", "queue=logged", "work=slow-item", "(*blocker).run"} {
		if !strings.Contains(log, want) {
			t.Fatalf("log lacks %q:\n%s", want, log)
		}
	}
}

func TestWatchdogOff(t *testing.T) {
	q, _ := newQueue(t, WithWorkers(1), WithWatchdog(0))
	if q.wd != nil {
		t.Fatal("watchdog running although turned off")
	}
	var c counter
	q.Schedule(NewWork("x", c.run))
	q.Close()
	if c.get() != 1 {
		t.Fatal("item did not run")
	}
}
