package client_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/ukeystest"
)

// TestPipelinedClient shares one pipelining client among goroutines that
// add, read, search and fail at the same time: each gets its own answers,
// errors included, whatever the daemon gathered into one write.
func TestPipelinedClient(t *testing.T) {
	d := ukeystest.NewDaemon(t)
	c, err := client.Dial(d.Socket, client.WithPipelining())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const workers, rounds = 16, 200
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				desc := fmt.Sprintf("w%d-%d", w, i)
				payload := []byte(desc + "-payload")
				id, err := c.AddKey("user", desc, payload, keys.UserKeyring)
				if err != nil {
					errs <- fmt.Errorf("add %s: %w", desc, err)
					return
				}
				got, err := c.Read(id)
				if err != nil || string(got) != string(payload) {
					errs <- fmt.Errorf("read %s: %q, %v", desc, got, err)
					return
				}
				found, err := c.Search(keys.UserKeyring, "user", desc, 0)
				if err != nil || found != id {
					errs <- fmt.Errorf("search %s: %d, %v; want %d", desc, found, err, id)
					return
				}
				if _, err := c.Search(keys.UserKeyring, "user", desc+"-absent", 0); !errors.Is(err, keys.ENOKEY) {
					errs <- fmt.Errorf("search of an absent key: %v, want ENOKEY", err)
					return
				}
				if i%4 == 0 {
					if err := c.Unlink(id, keys.UserKeyring); err != nil {
						errs <- fmt.Errorf("unlink %s: %w", desc, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	ring, err := c.Read(keys.UserKeyring)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(ring)/4, workers*rounds*3/4; got != want {
		t.Fatalf("user keyring holds %d keys, want %d", got, want)
	}
}

// TestPipelinedClientClose closes a pipelining client while goroutines
// have requests in flight: each gets an answer or an error, none hangs,
// and calls after Close fail.
func TestPipelinedClientClose(t *testing.T) {
	d := ukeystest.NewDaemon(t)
	c, err := client.Dial(d.Socket, client.WithPipelining())
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.AddKey("user", "k", []byte("v"), keys.UserKeyring)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	started := make(chan struct{}, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				if i == 10 {
					started <- struct{}{}
				}
				if _, err := c.Read(id); err != nil {
					return
				}
			}
		}()
	}
	for range 8 {
		<-started
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if _, err := c.Read(id); err == nil {
		t.Fatal("Read after Close succeeded")
	}
}
