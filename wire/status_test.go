package wire

import (
	"reflect"
	"strings"
	"testing"
)

func TestNamespacesStatus(t *testing.T) {
	nss := []NamespaceStatus{
		{Kind: "pod", ID: "5f3a1c", Containers: []string{"app", "sidecar"}, Keys: 3, Bytes: 120, Processes: 2, Calls: 100, Refusals: 1},
		{Kind: "container", ID: "odd id, \"quoted\"\n", Containers: []string{"odd id, \"quoted\"\n", "a,b"}, Calls: 1 << 63},
		{Kind: "container", ID: "", Containers: nil},
	}
	text := "scope: system\npid: 1\n" + string(AppendNamespaces(nil, nss)) + "rcu_stalls: 0\n"
	got, listed, err := ParseNamespaces(text)
	if err != nil || !listed || !reflect.DeepEqual(got, nss) {
		t.Fatalf("ParseNamespaces(%q) = %+v, %v, %v; want %+v", text, got, listed, err, nss)
	}
	if !strings.Contains(text, "namespace: pod=5f3a1c keys=3 bytes=120 processes=2 calls=100 refusals=1 containers=app,sidecar\n") {
		t.Errorf("the pod's line is not as documented:\n%s", text)
	}
	// An older daemon's status, or one for an unprivileged caller.
	if got, listed, err := ParseNamespaces("scope: system\npid: 1\n"); err != nil || listed || got != nil {
		t.Errorf("a status without namespaces: %v %v %v", got, listed, err)
	}
	// None, said.
	if got, listed, err := ParseNamespaces(string(AppendNamespaces(nil, nil))); err != nil || !listed || got != nil {
		t.Errorf("no namespaces: %v %v %v", got, listed, err)
	}
	// A newer daemon's field is skipped.
	if got, _, err := ParseNamespaces("namespaces: 1\nnamespace: container=c keys=1 threads=7,8 containers=c\n"); err != nil || got[0].Keys != 1 || got[0].Containers[0] != "c" {
		t.Errorf("an unknown field: %+v %v", got, err)
	}
	for _, bad := range []string{
		"namespaces: 2\nnamespace: pod=p keys=1\n",
		"namespaces: x\n",
		"namespaces: 1\nnamespace: keys=1 pod=p\n",
		"namespaces: 1\nnamespace: pod=\"p\n",
		"namespaces: 1\nnamespace: pod=p keys=-\n",
		"namespaces: 1\nnamespace: pod=p keys=1,2\n",
		"namespaces: 1\nnamespace: pod=p,q keys=1\n",
	} {
		if _, _, err := ParseNamespaces(bad); err == nil {
			t.Errorf("ParseNamespaces(%q) took it", bad)
		}
	}
}

// FuzzParseNamespaces: a status line of any bytes is read or refused,
// never a panic, and what is read is written back as it reads.
func FuzzParseNamespaces(f *testing.F) {
	f.Add(string(AppendNamespaces(nil, []NamespaceStatus{{Kind: "pod", ID: "p", Containers: []string{"a", "b"}, Keys: 1}})))
	f.Add("namespaces: 1\nnamespace: container=\"a b\" containers=\"a b\",c\n")
	f.Fuzz(func(t *testing.T, text string) {
		nss, listed, err := ParseNamespaces(text)
		if err != nil || !listed {
			return
		}
		again, _, err := ParseNamespaces(string(AppendNamespaces(nil, nss)))
		if err != nil || !reflect.DeepEqual(again, nss) {
			t.Fatalf("%q read as %+v, written and read again as %+v (%v)", text, nss, again, err)
		}
	})
}
