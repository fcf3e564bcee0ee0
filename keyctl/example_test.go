package keyctl_test

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/ukeys/ukeys/keyctl"
)

// A permission mask reads as keyctl describe prints it; an errno as the
// C library's strerror, and it matches the system's own errno on Linux.
func Example() {
	fmt.Println(keyctl.PermDefault)
	fmt.Println(keyctl.ENOKEY)
	fmt.Println(errors.Is(keyctl.EKEYREVOKED, syscall.Errno(128)), keyctl.SessionKeyring)
	// Output:
	// alswrv-----v------------
	// Required key not available
	// true -3
}
