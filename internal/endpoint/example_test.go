package endpoint_test

import (
	"fmt"
	"os"

	"github.com/ukeys/ukeys/internal/endpoint"
)

func Example() {
	os.Setenv(endpoint.SocketEnv, "/tmp/example/ukeyd.sock")
	defer os.Unsetenv(endpoint.SocketEnv)
	fmt.Println(endpoint.Socket())
	// Output: /tmp/example/ukeyd.sock
}
