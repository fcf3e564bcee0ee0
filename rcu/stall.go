package rcu

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/ukeys/ukeys/internal/goroutine"
	"github.com/ukeys/ukeys/internal/invariants"
)

// StallReport describes a grace period that has been running longer than
// the stall timeout, and what holds it.
type StallReport struct {
	// Domain is the domain's name.
	Domain string
	// GracePeriod numbers the stalled grace period (1 is the first since
	// New).
	GracePeriod uint64
	// Started is when the grace period began; Age how old it was when the
	// report was made.
	Started time.Time
	Age     time.Duration
	// Report counts the reports made for this grace period: 1, 2, 3…
	// Reports repeat at doubling intervals while the stall lasts.
	Report int
	// Waiting says what the grace period was waiting for when reported:
	// "read sections" or "tasks".
	Waiting string
	// Sections is the number of read sections holding the grace period.
	Sections int64
	// SectionGoroutines lists the goroutines holding read sections of the
	// domain with their stacks. It is filled only in builds with
	// invariants, where section owners are tracked.
	SectionGoroutines []StalledGoroutine
	// Tasks lists the tasks that have not yet reported a quiescent state.
	Tasks []StalledTask
}

// StalledTask is a task holding a grace period.
type StalledTask struct {
	Name      string
	Goroutine int64
	// Stack is the goroutine's stack at the time of the report; empty if
	// the goroutine has exited without unregistering its task.
	Stack string
}

// StalledGoroutine is a goroutine holding read sections.
type StalledGoroutine struct {
	Goroutine int64
	Sections  int
	Stack     string
}

// String renders the report in the spirit of the kernel's RCU stall
// warnings, one holdout per line followed by its stack.
func (r StallReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rcu: domain %q: grace period %d is %v old (report %d), waiting for %s: %d read section(s), %d task(s)\n",
		r.Domain, r.GracePeriod, r.Age.Round(time.Millisecond), r.Report, r.Waiting, r.Sections, len(r.Tasks))
	for _, t := range r.Tasks {
		fmt.Fprintf(&b, "  task %q (goroutine %d) has not reported a quiescent state\n", t.Name, t.Goroutine)
		if t.Stack != "" {
			b.WriteString(indent(t.Stack))
		}
	}
	for _, g := range r.SectionGoroutines {
		fmt.Fprintf(&b, "  goroutine %d holds %d read section(s)\n", g.Goroutine, g.Sections)
		if g.Stack != "" {
			b.WriteString(indent(g.Stack))
		}
	}
	return b.String()
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}

// stallWatcher waits on the stall timer, which the grace-period path arms
// when a grace period begins and stops when it ends. Nothing here runs on
// the grace-period path itself.
func (d *Domain) stallWatcher() {
	defer d.wg.Done()
	g := &d.gp
	for {
		select {
		case <-g.stallTm.C:
		case <-d.stopCtx.Done():
			g.mu.Lock()
			g.stallTm.Stop()
			g.mu.Unlock()
			return
		}
		g.mu.Lock()
		if g.seq&1 == 0 {
			g.mu.Unlock()
			continue // it ended as the timer fired
		}
		age := time.Since(g.started)
		// The nth report is due at timeout * (2^n - 1): intervals double.
		due := stallDue(d.cfg.stallTimeout, g.stallReports)
		if age < due {
			g.stallTm.Reset(due - age) // a new grace period re-armed the timer
			g.mu.Unlock()
			continue
		}
		g.stallReports++
		r := StallReport{
			Domain:      d.cfg.name,
			GracePeriod: g.seq/2 + 1,
			Started:     g.started,
			Age:         age,
			Report:      g.stallReports,
		}
		next := stallDue(d.cfg.stallTimeout, g.stallReports)
		g.stallTm.Reset(next - age)
		phase := g.phase.Load()
		g.mu.Unlock()
		d.fillStall(&r, phase)
		if d.cfg.stallHandler != nil {
			d.cfg.stallHandler(r)
		} else {
			d.logStall(r)
		}
		d.stalls.Add(1) // after the handler, so a count implies a delivered report
	}
}

// stallDue returns the age at which report n+1 of a grace period is due
// when n have been made: timeout * (2^(n+1) - 1), so the intervals between
// reports double. The exponent is capped so the product cannot overflow.
func stallDue(timeout time.Duration, n int) time.Duration {
	n = min(n, 20)
	return timeout * time.Duration(1<<(n+1)-1)
}

func (d *Domain) fillStall(r *StallReport, phase uint32) {
	r.Waiting = phaseNames[phase]
	if phase == phaseInactive || phase == phaseActive {
		if w := d.waitIdx.Load(); w != 0 {
			r.Sections = d.sectionsIn(w - 1)
		}
	}
	var ids []int64
	d.tasksMu.Lock()
	for t := range d.tasks {
		if t.state.Load()&stateNeed != 0 {
			r.Tasks = append(r.Tasks, StalledTask{Name: t.name, Goroutine: t.gid})
			ids = append(ids, t.gid)
		}
	}
	d.tasksMu.Unlock()
	if invariants.Enabled && r.Sections > 0 {
		d.ownersMu.Lock()
		for gid, n := range d.owners {
			r.SectionGoroutines = append(r.SectionGoroutines, StalledGoroutine{Goroutine: gid, Sections: n})
			ids = append(ids, gid)
		}
		d.ownersMu.Unlock()
	}
	slices.SortFunc(r.Tasks, func(a, b StalledTask) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(r.SectionGoroutines, func(a, b StalledGoroutine) int { return int(a.Goroutine - b.Goroutine) })
	stacks := goroutine.Stacks(ids...)
	for i := range r.Tasks {
		r.Tasks[i].Stack = stacks[r.Tasks[i].Goroutine]
	}
	for i := range r.SectionGoroutines {
		r.SectionGoroutines[i].Stack = stacks[r.SectionGoroutines[i].Goroutine]
	}
}

func (d *Domain) logStall(r StallReport) {
	names := make([]string, len(r.Tasks))
	for i, t := range r.Tasks {
		names[i] = t.Name
	}
	d.logger().Warn("rcu: grace period stalled",
		slog.String("domain", r.Domain),
		slog.Uint64("grace_period", r.GracePeriod),
		slog.Duration("age", r.Age),
		slog.Int("report", r.Report),
		slog.String("waiting_for", r.Waiting),
		slog.Int64("sections", r.Sections),
		slog.Any("tasks", names),
		slog.String("detail", r.String()),
	)
}
