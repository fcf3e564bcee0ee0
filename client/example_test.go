package client_test

import (
	"errors"
	"fmt"
	"testing"

	"go.uber.org/goleak"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A program that wants keyrings without a daemon serves itself in
// process, with exactly the daemon's rules.
func Example() {
	svc := keys.New()
	defer svc.Close()
	c := client.New(server.NewLocal(svc, keys.Cred{UID: 1000, GID: 1000, PID: 77}))
	defer c.Close()

	if _, err := c.JoinSessionKeyring(nil); err != nil {
		panic(err)
	}
	id, _ := c.AddKey("user", "api:token", []byte("s3cr3t"), keys.SessionKeyring)
	b, _ := c.Read(id)
	fmt.Printf("%s\n", b)
	_, err := c.Read(id + 1)
	fmt.Println(errors.Is(err, keys.ENOKEY))
	// Output:
	// s3cr3t
	// true
}

func TestInProcessErrors(t *testing.T) {
	svc := keys.New()
	defer svc.Close()
	c := client.New(server.NewLocal(svc, keys.Cred{UID: 1000, GID: 1000, PID: 78}))
	defer c.Close()
	_, err := c.AddKey("nosuch", "d", []byte("x"), keys.SessionKeyring)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Errno != keys.ENODEV || ce.Op != "add_key" {
		t.Fatalf("AddKey with an unknown type: %v", err)
	}
	if err.Error() != "add_key: No such device" {
		t.Fatalf("message %q", err.Error())
	}
}
