package main

import (
	"errors"
	"io"
)

// command is one line of keyctl's command table. Entries without an
// action only add a line to the usage text.
type command struct {
	name   string
	format string
	action func(a *app, args []string)
}

// commands is keyctl 1.6.3's table, in its order (the usage text lists
// it as is).
var commands []command

// extras are ukeyctl's own commands, not in keyctl's usage text.
var extras []command

func init() {
	commands = []command{
		{"--version", "", (*app).cmdVersion},
		{"add", "[-x] <type> <desc> <data> <keyring>", (*app).cmdAdd},
		{"chgrp", "<key> <gid>", (*app).cmdChgrp},
		{"chown", "<key> <uid>", (*app).cmdChown},
		{"clear", "<keyring>", (*app).cmdClear},
		{"describe", "<keyring>", (*app).cmdDescribe},
		{"dh_compute", "<private> <prime> <base>", (*app).cmdDHCompute},
		{"dh_compute_kdf", "<private> <prime> <base> <len> <hash_name>", (*app).cmdDHComputeKDF},
		{"dh_compute_kdf_oi", "[-x] <private> <prime> <base> <len> <hash_name>", (*app).cmdDHComputeKDFOI},
		{"get_persistent", "<keyring> [<uid>]", (*app).cmdGetPersistent},
		{"id", "<key>", (*app).cmdID},
		{"instantiate", "[-x] <key> <data> <keyring>", (*app).cmdInstantiate},
		{"invalidate", "<key>", (*app).cmdInvalidate},
		{"link", "<key> <keyring>", (*app).cmdLink},
		{"list", "<keyring>", (*app).cmdList},
		{"move", "[-f] <key> <from_keyring> <to_keyring>", (*app).cmdMove},
		{"negate", "<key> <timeout> <keyring>", (*app).cmdNegate},
		{"new_session", "[<name>]", (*app).cmdNewSession},
		{"newring", "<name> <keyring>", (*app).cmdNewring},
		{"padd", "[-x] <type> <desc> <keyring>", (*app).cmdPadd},
		{"pinstantiate", "[-x] <key> <keyring>", (*app).cmdPinstantiate},
		{"pipe", "<key>", (*app).cmdPipe},
		{"pkey_query", "<key> <pass> [k=v]*", (*app).cmdPkeyQuery},
		{"pkey_encrypt", "<key> <pass> <datafile> [k=v]*", (*app).cmdPkeyEncrypt},
		{"pkey_decrypt", "<key> <pass> <datafile> [k=v]*", (*app).cmdPkeyDecrypt},
		{"pkey_sign", "<key> <pass> <datafile> [k=v]*", (*app).cmdPkeySign},
		{"pkey_verify", "<key> <pass> <datafile> <sigfile> [k=v]*", (*app).cmdPkeyVerify},
		{"prequest2", "<type> <desc> [<dest_keyring>]", (*app).cmdPrequest2},
		{"print", "<key>", (*app).cmdPrint},
		{"pupdate", "[-x] <key>", (*app).cmdPupdate},
		{"purge", "<type>", (*app).cmdPurge},
		{"purge", "[-p] [-i] <type> <desc>", nil},
		{"purge", "-s <type> <desc>", nil},
		{"rdescribe", "<keyring> [sep]", (*app).cmdRdescribe},
		{"read", "<key>", (*app).cmdRead},
		{"reap", "[-v]", (*app).cmdReap},
		{"reject", "<key> <timeout> <error> <keyring>", (*app).cmdReject},
		{"request", "<type> <desc> [<dest_keyring>]", (*app).cmdRequest},
		{"request2", "<type> <desc> <info> [<dest_keyring>]", (*app).cmdRequest2},
		{"restrict_keyring", "<keyring> [<type> [<restriction>]]", (*app).cmdRestrictKeyring},
		{"revoke", "<key>", (*app).cmdRevoke},
		{"rlist", "<keyring>", (*app).cmdRlist},
		{"search", "<keyring> <type> <desc> [<dest_keyring>]", (*app).cmdSearch},
		{"security", "<key>", (*app).cmdSecurity},
		{"session", "", (*app).cmdSession},
		{"session", "- [<prog> <arg1> <arg2> ...]", nil},
		{"session", "<name> [<prog> <arg1> <arg2> ...]", nil},
		{"setperm", "<key> <mask>", (*app).cmdSetperm},
		{"show", "[-x] [<keyring>]", (*app).cmdShow},
		{"supports", "[<cap> | --raw]", (*app).cmdSupports},
		{"timeout", "<key> <timeout>", (*app).cmdTimeout},
		{"unlink", "<key> [<keyring>]", (*app).cmdUnlink},
		{"update", "[-x] <key> <data>", (*app).cmdUpdate},
		{"watch", "[-f<filters>] <key>", (*app).cmdWatch},
		{"watch_add", "<fd> <key>", (*app).cmdWatchAdd},
		{"watch_rm", "<fd> <key>", (*app).cmdWatchRm},
		{"watch_session", "[-f<filters>] [-n <name>] <notifylog> <gclog> <fd> <prog> [<arg1> <arg2> ...]", (*app).cmdWatchSession},
		{"watch_sync", "<fd>", (*app).cmdWatchSync},
		{"--test", "...", (*app).cmdTest},
	}
	extras = []command{
		{"proc", "keys|key-users", (*app).cmdProc},
		{"sysctl", "[<name>[=<value>]]", (*app).cmdSysctl},
		{"status", "", (*app).cmdStatus},
		{"run", "[--] <program> [<args>...]", (*app).cmdRun},
		{"seccomp-profile", "[--listener <path>] [--output <file>] [--base default | <profile>]", (*app).cmdSeccompProfile},
		{"oci-runtime", "[--listener <path>] [--runtime <runtime>] [--new-keyring] -- <runtime args>...", (*app).cmdOCIRuntime},
		{"request-key", "[-d] [-D <desc>] [-l] [-n] [-v] <op> <key> <uid> <gid> <threadring> <processring> <sessionring> [<info>]", (*app).cmdRequestKey},
	}
}

// doCommand finds and runs the command named by argv[1]. keyctl 1.6.3's
// matcher looks like it accepts unambiguous prefixes, but it skips every
// name longer than the argument, so only exact names ever match; so here.
func (a *app) doCommand(argv []string, table []command, group string) {
	args := argv[1:]
	if len(args) == 0 {
		a.format()
	}
	for _, tbl := range [][]command{table, extras} {
		for _, c := range tbl {
			if c.action != nil && c.name == args[0] {
				c.action(a, args)
				a.exit(0)
			}
		}
		if group != "" {
			break
		}
	}
	a.eprintf("Unknown %scommand\n", group)
	a.exit(2)
}

// format prints the usage text and exits 2.
func (a *app) format() {
	a.eprintf("Format:\n")
	for _, c := range commands {
		a.eprintf("  keyctl %s %s\n", c.name, c.format)
	}
	a.eprintf("\n")
	a.keyIDLegend()
	if a.prog != "keyctl" {
		a.eprintf("\nukeys extras:\n")
		for _, c := range extras {
			a.eprintf("  ukeyctl %s %s\n", c.name, c.format)
		}
	}
	a.exit(2)
}

func (a *app) keyIDLegend() {
	a.eprintf("Key/keyring ID:\n")
	a.eprintf("  <nnn>   numeric keyring ID\n")
	a.eprintf("  @t      thread keyring\n")
	a.eprintf("  @p      process keyring\n")
	a.eprintf("  @s      session keyring\n")
	a.eprintf("  @u      user keyring\n")
	a.eprintf("  @us     user default session keyring\n")
	a.eprintf("  @g      group keyring\n")
	a.eprintf("  @a      assumed request_key authorisation key\n")
	a.eprintf("\n")
	a.eprintf("<type> can be \"user\" for a user-defined keyring\n")
	a.eprintf("If you do this, prefix the description with \"<subtype>:\"\n")
}

func isEOF(err error) bool { return errors.Is(err, io.EOF) }
