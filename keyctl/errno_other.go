//go:build !linux

package keyctl

const sameNumbering = false
