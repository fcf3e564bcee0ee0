package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The container image's ukeyd is built as deploy/container/Dockerfile
// says, and that build gives a static binary that needs nothing of the
// empty image it goes into. (Building the image itself needs the Go
// image from a registry; this test builds the same way on the host.)
func TestImageBuildIsStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ukeyd")
	}
	df, err := os.ReadFile(filepath.Join("..", "..", "deploy", "container", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ENV CGO_ENABLED=0 GOWORK=off", `go build -trimpath -ldflags="-s -w" -o /out/bin/ ./cmd/ukeyd ./cmd/ukeyctl`, "FROM scratch"} {
		if !strings.Contains(string(df), want) {
			t.Fatalf("the Dockerfile no longer says %q", want)
		}
	}
	out := t.TempDir()
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out+"/", "./cmd/ukeyd", "./cmd/ukeyctl")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	for _, name := range []string{"ukeyd", "ukeyctl"} {
		f, err := elf.Open(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("%s is dynamically linked (%v)", name, p.Type)
			}
		}
		f.Close()
	}
	// It runs with nothing around it but its own flags.
	help := exec.Command(filepath.Join(out, "ukeyd"), "-h")
	help.Env = []string{}
	b, _ := help.CombinedOutput()
	if !strings.Contains(string(b), "-takeover") {
		t.Fatalf("ukeyd -h:\n%s", b)
	}
}
