package server_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
)

func Example() {
	dir, _ := os.MkdirTemp("", "ukeyd-example-")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "ukeyd.sock")

	svc := keys.New()
	defer svc.Close()
	srv := server.New(svc, server.Config{})
	ln, err := server.Listen(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	c, err := client.Dial(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	id, _ := c.AddKey("user", "greeting", []byte("hello"), keys.ProcessKeyring)
	payload, _ := c.Read(id)
	fmt.Printf("%s\n", payload)
	c.Close()

	srv.Shutdown(context.Background())
	fmt.Println(<-served == server.ErrClosed)
	// Output:
	// hello
	// true
}
