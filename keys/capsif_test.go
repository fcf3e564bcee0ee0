package keys

import (
	"encoding/json"
	"testing"
)

// capsSource answers CapsCount with in, counting the questions.
type capsSource struct {
	in    bool
	asked int
}

func (s *capsSource) CapsCount() bool { s.asked++; return s.in }

// Conditional capabilities (Cred.CapsIf) count only if their source says
// so, which is asked only where a capability they hold is checked; a
// caller's state, handed over, keeps them without their source, which
// leaves them counting for nothing.
func TestConditionalCapabilities(t *testing.T) {
	src := &capsSource{}
	cred := Cred{UID: 1000, CapsKnown: true, CapsIf: 1 << CapSysAdmin, CapsIn: src}
	if cred.Capable(CapSetUID) || src.asked != 0 {
		t.Fatalf("a capability not held: capable, or the source asked (%d)", src.asked)
	}
	if cred.Capable(CapSysAdmin) || src.asked != 1 {
		t.Fatalf("a capability held that does not count: capable, or the source not asked once (%d)", src.asked)
	}
	src.in = true
	if !cred.Capable(CapSysAdmin) {
		t.Fatal("a capability held that counts: not capable")
	}
	s := New()
	defer s.Close()
	c := s.NewCaller(cred)
	defer c.Release()
	if cr := c.Cred(); !cr.Capable(CapSysAdmin) {
		t.Fatal("the caller's: not capable")
	}
	st := c.State()
	if st.Cred.CapsIn != nil {
		t.Fatal("a caller's state keeps the source of its capabilities")
	}
	b, err := json.Marshal(&st)
	if err != nil {
		t.Fatal(err)
	}
	var back CallerState
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if cr := back.Cred; cr.Capable(CapSysAdmin) {
		t.Fatal("restored without their source, conditional capabilities count")
	}
}
