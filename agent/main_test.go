package agent_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// testChildren are the roles this test binary plays as a child (a
// container's process, a runtime, a forger), which the files that need
// them register.
var testChildren = map[string]func(){}

func TestMain(m *testing.M) {
	if child := testChildren[os.Getenv("UKEYS_TEST_CHILD")]; child != nil {
		child()
		return
	}
	goleak.VerifyTestMain(m)
}
