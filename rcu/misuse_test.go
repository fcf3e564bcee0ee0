package rcu

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/internal/invariants"
)

// mustPanic runs fn and fails unless it panics with a message containing
// want.
func mustPanic(t *testing.T, want string, fn func()) {
	t.Helper()
	var got any
	func() {
		defer func() { got = recover() }()
		fn()
	}()
	if got == nil {
		t.Fatalf("no panic, want one mentioning %q", want)
	}
	if msg := fmt.Sprint(got); !strings.Contains(msg, want) {
		t.Fatalf("panic %q does not mention %q", msg, want)
	}
}

func TestMisusePanics(t *testing.T) {
	d := newDomain(t)
	cases := []struct {
		name, want string
		fn         func()
	}{
		{"end twice", "End called twice", func() {
			s := d.Read()
			s.End()
			s.End()
		}},
		{"end zero section", "End called twice or on a Section not returned by Read", func() {
			var s Section
			s.End()
		}},
		{"checkpoint after unregister", "after Unregister", func() {
			tk := d.Register("gone")
			tk.Unregister()
			tk.Checkpoint()
		}},
		{"quiescent after unregister", "after Unregister", func() {
			tk := d.Register("gone")
			tk.Unregister()
			tk.Quiescent()
		}},
		{"unregister twice", "Unregister on task twice-gone twice", func() {
			tk := d.Register("twice-gone")
			tk.Unregister()
			tk.Unregister()
		}},
		{"checkpoint while offline", "while offline", func() {
			tk := d.Register("sleepy")
			defer tk.Unregister()
			tk.Offline()
			tk.Checkpoint()
		}},
		{"offline twice", "already offline", func() {
			tk := d.Register("sleepy")
			defer tk.Unregister()
			tk.Offline()
			tk.Offline()
		}},
		{"online twice", "already online", func() {
			tk := d.Register("awake")
			defer tk.Unregister()
			tk.Online()
		}},
		{"nil callback", "nil function", func() { d.Call(nil) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { mustPanic(t, c.want, c.fn) })
	}
}

func TestBarrierFromCallbackPanics(t *testing.T) {
	d := newDomain(t)
	got := make(chan any, 1)
	d.Call(func() {
		defer func() { got <- recover() }()
		_ = d.Barrier(context.Background())
	})
	if err := d.Barrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	if msg := fmt.Sprint(<-got); !strings.Contains(msg, "Barrier called from a callback") {
		t.Fatalf("Barrier in a callback: panic %q", msg)
	}
}

func TestBlockingInsideSectionPanics(t *testing.T) {
	if !invariants.Enabled {
		t.Skip("section owners are tracked only with -race or -tags ukeys_invariants")
	}
	d := newDomain(t)
	for _, op := range []struct {
		name string
		fn   func() error
	}{
		{"Synchronize", func() error { return d.Synchronize(context.Background()) }},
		{"Barrier", func() error { return d.Barrier(context.Background()) }},
		{"Wait", func() error { return d.Wait(context.Background(), d.Start()) }},
	} {
		t.Run(op.name, func(t *testing.T) {
			s := d.Read()
			defer s.End()
			mustPanic(t, op.name+" called inside a read section", func() { _ = op.fn() })
		})
	}
	t.Run("online task", func(t *testing.T) {
		tk := d.Register("self-waiter")
		defer tk.Unregister()
		mustPanic(t, "called by online task self-waiter", func() { _ = d.Synchronize(context.Background()) })
		tk.Offline()
		if err := d.Synchronize(context.Background()); err != nil {
			t.Fatal(err)
		}
		tk.Online()
	})
	t.Run("other domain is fine", func(t *testing.T) {
		other := newDomain(t)
		s := other.Read()
		defer s.End()
		if err := d.Synchronize(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}
