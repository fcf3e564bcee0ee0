//go:build race || ukeys_invariants

package invariants

// Enabled is true when self-checks are compiled in.
const Enabled = true
