//go:build !linux

package keys

const sameNumbering = false
