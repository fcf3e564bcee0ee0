package hardening_test

import (
	"encoding/hex"
	"fmt"

	"github.com/ukeys/ukeys/integration/hardening"
)

func ExampleLeaks() {
	marker := []byte("s3cret-marker")
	captured := map[string][]byte{
		"log":     []byte(`level=INFO msg="key added" key=123`),
		"debug":   []byte("payload=" + hex.EncodeToString(marker)),
		"metrics": []byte(`ukeyd_operations_total{op="add_key",errno="0"} 1`),
	}
	fmt.Println(hardening.Leaks(marker, captured))
	// Output: [debug]
}
