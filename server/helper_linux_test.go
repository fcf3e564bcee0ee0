package server

import "os"

// procTreeTestable reports whether process.Stat can read processes here.
func procTreeTestable() bool {
	_, err := os.Stat("/proc/self/stat")
	return err == nil
}
