package procfs_test

import (
	"fmt"

	"github.com/ukeys/ukeys/internal/procfs"
)

func ExampleParseStatus() {
	st, ok := procfs.ParseStatus([]byte("Tgid:\t40\nUid:\t1000\t1000\t1000\t1000\nGid:\t100\t100\t100\t100\nGroups:\t27\nThreads:\t2\nCapEff:\t0000000000200000\n"))
	fmt.Println(ok, st.Tgid, st.UIDs[1], st.GIDs[1], st.Groups, st.Threads, st.CapEff == 1<<21)
	// Output: true 40 1000 100 [27] 2 true
}
