package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/keys/asymmetric"
)

// loadTrusted adds every certificate in dir (files named *.der, *.crt or
// *.pem, in name order) to the service's .builtin_trusted_keys, as the
// kernel's build compiles certificates into its own. A file that is not a
// certificate stops the daemon: a trust anchor silently missing would
// refuse keys for a reason nobody sees.
func loadTrusted(svc *keys.Service, dir string) (int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	names := []string{}
	for _, e := range ents {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if e.Type().IsRegular() && (ext == ".der" || ext == ".crt" || ext == ".pem") {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return 0, err
		}
		if _, err := asymmetric.AddBuiltinTrusted(svc, b); err != nil {
			return 0, fmt.Errorf("%s: %w", n, err)
		}
	}
	return len(names), nil
}
