package server

import (
	"testing"
	"time"

	"github.com/ukeys/ukeys/internal/container"
	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/keys"
)

// A container's expensive operations (a signature check, dh_compute)
// take their slot from the daemon's one bound, not from a bound of their
// own: with the host's slots all held, a container's waits, and runs
// once one is free. Each container Server with a bound of its own would
// let a hundred containers run a hundred checks at once on two
// processors.
func TestAgentSharesTheHostsExpensiveBound(t *testing.T) {
	svc := keys.New()
	defer svc.Close()
	host := New(svc, Config{Limits: Limits{MaxExpensive: 1, MaxExpensivePerUID: 1}})
	defer host.Shutdown(t.Context())
	a := NewAgent(AgentConfig{Host: host, Server: Config{Limits: Limits{MaxExpensive: 1, MaxExpensivePerUID: 1}}})
	defer a.Shutdown(t.Context())
	ns := a.newNamespace(container.Identity{}, process.Handle{})
	defer ns.svc.Close()
	defer ns.srv.Shutdown(t.Context())

	host.usage.heavy <- struct{}{} // the host's one slot, held
	ran := make(chan struct{})
	go ns.srv.expensive(0, func() { close(ran) })
	select {
	case <-ran:
		t.Fatal("a container's expensive operation ran while the daemon's every slot was held")
	case <-time.After(50 * time.Millisecond):
	}
	<-host.usage.heavy
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("a container's expensive operation did not run once the daemon's slot was free")
	}
}
