package main

import (
	"strings"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keyctl"
)

// watchReadyHook, if set (by tests), is called once a watch is in place.
var watchReadyHook func()

// option is one option found by getopt.
type option struct {
	c   byte
	arg string
}

// getopt parses args (args[0] names the program) as glibc's getopt(3)
// does with optstring: options may follow operands unless optstring
// starts with '+', "--" ends them. On an unknown option or a missing
// argument it prints getopt's complaint and returns ok false.
func (a *app) getopt(args []string, optstring string) (opts []option, operands []string, ok bool) {
	posix := strings.HasPrefix(optstring, "+")
	optstring = strings.TrimPrefix(optstring, "+")
	for i := 1; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			return opts, append(operands, args[i+1:]...), true
		}
		if len(arg) < 2 || arg[0] != '-' {
			if posix {
				return opts, append(operands, args[i:]...), true
			}
			operands = append(operands, arg)
			continue
		}
		for j := 1; j < len(arg); j++ {
			c := arg[j]
			k := strings.IndexByte(optstring, c)
			if k < 0 || c == ':' {
				a.eprintf("%s: invalid option -- '%c'\n", args[0], c)
				return opts, operands, false
			}
			if k+1 < len(optstring) && optstring[k+1] == ':' {
				if j+1 < len(arg) {
					opts = append(opts, option{c, arg[j+1:]})
				} else if i+1 < len(args) {
					i++
					opts = append(opts, option{c, args[i]})
				} else {
					a.eprintf("%s: option requires an argument -- '%c'\n", args[0], c)
					return opts, operands, false
				}
				break
			}
			opts = append(opts, option{c, ""})
		}
	}
	return opts, operands, true
}

// watchFilter is the set of notification subtypes -f lets through.
type watchFilter struct {
	on   bool
	bits uint32
}

// parseFilter adds -f's letters: i p l n c r v s for subtypes 0…7.
func (a *app) parseFilter(f *watchFilter, s string) {
	const mapping = "iplncrvs"
	f.on = true
	for i := 0; i < len(s); i++ {
		k := strings.IndexByte(mapping, s[i])
		if k < 0 || s[i] == 0 {
			a.eprintf("Unknown filter character '%c'\n", s[i])
			a.exit(2)
		}
		f.bits |= 1 << k
	}
}

func (f *watchFilter) pass(kind keyctl.NotifyKind) bool {
	if !f.on || kind == keyctl.NotifyRemoved {
		return true
	}
	return kind < 32 && f.bits&(1<<kind) != 0
}

func (a *app) cmdWatch(args []string) {
	var filter watchFilter
	opts, rest, ok := a.getopt(args, "f:")
	if !ok {
		a.eprintf("Unknown option\n")
		a.exit(2)
	}
	for _, o := range opts {
		a.parseFilter(&filter, o.arg)
	}
	if len(rest) != 1 {
		a.format()
	}
	key := a.getKeyID(rest[0])
	if err := a.c().WatchKey(key, 1); err != nil {
		a.fail("keyctl_watch_key", err)
	}
	if watchReadyHook != nil {
		watchReadyHook()
	}
	a.lineBuf = true
	a.consume(a.c(), &filter, a.printf, a.printf)
}

// consume prints the events of cl's watches as keyctl's consumer does,
// one line each, until the watch with id 1 goes (its key was destroyed or
// the watch removed): then it exits 0.
func (a *app) consume(cl *client.Client, filter *watchFilter, log, gc func(string, ...any)) {
	for {
		n, err := cl.NextNotification()
		if err != nil {
			a.fail("read", err)
		}
		if !filter.pass(n.Kind) {
			continue
		}
		id := uint32(n.Key)
		switch n.Kind {
		case keyctl.NotifyInstantiated:
			log("%d inst\n", id)
		case keyctl.NotifyUpdated:
			log("%d upd\n", id)
		case keyctl.NotifyLinked:
			log("%d link %d\n", id, uint32(n.Aux))
		case keyctl.NotifyUnlinked:
			log("%d unlk %d\n", id, uint32(n.Aux))
		case keyctl.NotifyCleared:
			log("%d clr\n", id)
		case keyctl.NotifyRevoked:
			log("%d rev\n", id)
		case keyctl.NotifyInvalidated:
			log("%d inv\n", id)
		case keyctl.NotifySetAttr:
			log("%d attr\n", id)
		case keyctl.NotifyRemoved:
			gc("%d gc\n", id)
			if n.WatchID == 1 {
				a.exit(0)
			}
		}
	}
}

func (a *app) cmdWatchAdd(args []string) { a.watchFD(args, 2) }
func (a *app) cmdWatchRm(args []string)  { a.watchFD(args, -1) }
