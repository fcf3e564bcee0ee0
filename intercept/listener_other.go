//go:build !linux

package intercept

import (
	"github.com/ukeys/ukeys/keyctl"
)

// Install fails: only Linux has seccomp user notification.
func Install() (int, error) { return -1, ErrUnsupported }

// InstallAll fails: only Linux has seccomp user notification.
func InstallAll() (int, error) { return -1, ErrUnsupported }

// A Listener serves the calls a seccomp listener receives (Linux only).
type Listener struct{}

// NewListener fails: only Linux has seccomp user notification.
func NewListener(fd int, h Handler) (*Listener, error) { return nil, ErrUnsupported }

// SetBudget does nothing.
func (l *Listener) SetBudget(Budget) {}

// Serve returns [ErrUnsupported].
func (l *Listener) Serve() error { return ErrUnsupported }

// Close does nothing.
func (l *Listener) Close() error { return nil }

// Detach returns [ErrUnsupported].
func (l *Listener) Detach() (int, error) { return -1, ErrUnsupported }

// IsListener reports false: there are no seccomp listeners here.
func IsListener(fd int) bool { return false }

// Available reports false: only Linux has seccomp user notification.
func Available() bool { return false }

// SendListener fails: there are no seccomp listeners here.
func SendListener(conn, fd int) error { return ErrUnsupported }

// HandOff needs seccomp user notification.
func HandOff(conn int, all bool) error { return ErrUnsupported }

// ReceiveListener fails: there are no seccomp listeners here.
func ReceiveListener(conn int) (int, error) { return -1, ErrUnsupported }

// A WatchPipe is a notification pipe the daemon made for an intercepted
// program (Linux only).
type WatchPipe struct{}

// Post does nothing.
func (p *WatchPipe) Post(keyctl.Notification) {}

// OnGone calls fn: there are no pipes here.
func (p *WatchPipe) OnGone(fn func()) { fn() }

// Close does nothing.
func (p *WatchPipe) Close() {}

// PipeState is what a daemon hands over of a notification pipe.
type PipeState struct {
	Notes   int             `json:"notes,omitempty"`
	Filter  []byte          `json:"filter,omitempty"`
	Pending []PendingRecord `json:"pending,omitempty"`
}

// PendingRecord is a record waiting for room in a notification pipe.
type PendingRecord struct {
	N    keyctl.Notification `json:"n"`
	Loss bool                `json:"loss,omitempty"`
}

// State returns nothing: there are no pipes here.
func (p *WatchPipe) State() (PipeState, int) { return PipeState{}, -1 }

// AdoptWatchPipe fails: only Linux has seccomp user notification.
func AdoptWatchPipe(w int, st PipeState, give func()) (*WatchPipe, error) { return nil, ErrUnsupported }

// WatchPipes returns none: there are no pipes here.
func WatchPipes() []*WatchPipe { return nil }

// userNSCheck is a Linux listener's: no call is intercepted here.
type userNSCheck struct{}

func (*userNSCheck) counts() bool { return false }
