package server

import (
	"time"

	"github.com/ukeys/ukeys/wire"
)

// Observer receives the server's events for metrics. A nil Observer in
// [Config] observes nothing; package server/metrics implements one for
// Prometheus.
type Observer interface {
	Observe(op wire.Op, errno uint16, d time.Duration)
	ConnOpened()
	ConnClosed()
	Refused()
}

type nopObserver struct{}

func (nopObserver) Observe(wire.Op, uint16, time.Duration) {}
func (nopObserver) ConnOpened()                            {}
func (nopObserver) ConnClosed()                            {}
func (nopObserver) Refused()                               {}
