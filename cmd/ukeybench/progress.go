package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// progress shows on stderr where a long run is. On a terminal it redraws
// one line with a bar; elsewhere (a log, a pipe, a test) it prints a line
// at most every few seconds, so that logs stay short but a stuck run still
// shows where it stopped.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	label string
	total int
	done  int // the last step reported
	start time.Time
	last  time.Time
	open  bool // a redrawn line is on the terminal
}

func newProgress(w io.Writer) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &progress{w: w, tty: tty}
}

// say prints one line, ending a bar in progress.
func (p *progress) say(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endLine()
	fmt.Fprintf(p.w, "ukeybench: %s\n", s)
}

// begin starts a bar of total steps (0: unknown, only the time shows).
func (p *progress) begin(label string, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endLine()
	p.label, p.total, p.done = label, total, 0
	p.start, p.last = time.Now(), time.Time{}
	p.draw(0, true)
}

// step reports done steps of the bar.
func (p *progress) step(done int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = done
	p.draw(done, false)
}

// end finishes the bar where the last step left it (a bar that stops
// short says the work did not complete).
func (p *progress) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draw(p.done, true)
	p.endLine()
}

func (p *progress) endLine() {
	if p.open {
		fmt.Fprintln(p.w)
		p.open = false
	}
}

func (p *progress) draw(done int, force bool) {
	now := time.Now()
	every := 5 * time.Second
	if p.tty {
		every = 100 * time.Millisecond
	}
	if !force && now.Sub(p.last) < every {
		return
	}
	p.last = now
	el := now.Sub(p.start).Round(100 * time.Millisecond)
	var s string
	if p.total > 0 {
		const width = 30
		done = min(done, p.total)
		fill := width * done / p.total
		s = fmt.Sprintf("ukeybench: %s [%s%s] %d/%d %v", p.label,
			strings.Repeat("=", fill), strings.Repeat(" ", width-fill), done, p.total, el)
	} else {
		s = fmt.Sprintf("ukeybench: %s %v", p.label, el)
	}
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", s)
		p.open = true
		return
	}
	fmt.Fprintln(p.w, s)
}
