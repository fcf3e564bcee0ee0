package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ukeys/ukeys/agent"
	"github.com/ukeys/ukeys/server"
)

// An agent on a socket of its own, for container runtimes to hand it
// their containers' listeners (a profile's listenerPath names the
// socket); the containers together may hold the bounds it is given, and
// each container and each uid in one its share.
func Example() {
	dir, err := os.MkdirTemp("", "ukeys-agent-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	a := agent.New(agent.Config{Bounds: agent.Bounds{Procs: 64, BigKeyFiles: 64, Keys: 8000, Bytes: 8 << 20}})
	ln, err := server.Listen(filepath.Join(dir, "agent.sock"))
	if err != nil {
		fmt.Println(err)
		return
	}
	served := make(chan error, 1)
	defer ln.Close()
	go func() { served <- a.Serve(ln) }()

	ctr, uid := agent.Share(a.Bounds())
	fmt.Printf("each container: %+v\n", ctr)
	fmt.Printf("each uid in one: %+v\n", uid)
	fmt.Println("containers:", len(a.Containers()))

	a.Shutdown(context.Background())
	fmt.Println(<-served)
	// Output:
	// each container: {Procs:8 BigKeyFiles:8 Keys:1000 Bytes:1048576}
	// each uid in one: {Procs:2 BigKeyFiles:1 Keys:125 Bytes:131072}
	// containers: 0
	// server: closed
}
