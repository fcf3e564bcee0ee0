package tuning

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestZeroIsTheDefault(t *testing.T) {
	var g GC
	if g.ChunkSizeSet || g.ItemCPUTime || g.Queue != nil {
		t.Fatal("the zero GC must change nothing")
	}
}
