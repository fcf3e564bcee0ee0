package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/wire"
)

// ukeyctl's own commands: views of the daemon that the kernel gives in
// /proc and /proc/sys.

func (a *app) extraUsage(line string) {
	a.eprintf("Format:\n  ukeyctl %s\n", line)
	a.exit(2)
}

func (a *app) cmdProc(args []string) {
	if len(args) != 2 {
		a.extraUsage("proc keys|key-users")
	}
	var text string
	var err error
	switch args[1] {
	case "keys":
		text, err = a.c().ProcKeys()
	case "key-users":
		text, err = a.c().ProcKeyUsers()
	default:
		a.extraUsage("proc keys|key-users")
	}
	if err != nil {
		a.fail("proc "+args[1], err)
	}
	a.printf("%s", text)
}

// sysctlPrefix is how the kernel's tunables are named by sysctl(8); the
// daemon's answers use the bare names, and either form is accepted.
const sysctlPrefix = "kernel.keys."

func (a *app) cmdSysctl(args []string) {
	if len(args) > 2 {
		a.extraUsage("sysctl [<name>[=<value>]]")
	}
	if len(args) == 2 && strings.Contains(args[1], "=") {
		name, value, _ := strings.Cut(args[1], "=")
		name = strings.TrimPrefix(strings.TrimSpace(name), sysctlPrefix)
		if err := a.c().SetSysctl(name, strings.TrimSpace(value)); err != nil {
			a.fail("sysctl: "+name, err)
		}
	}
	text, err := a.c().Sysctl()
	if err != nil {
		a.fail("sysctl", err)
	}
	if len(args) == 1 {
		a.printf("%s", text)
		return
	}
	want, _, _ := strings.Cut(args[1], "=")
	want = strings.TrimPrefix(strings.TrimSpace(want), sysctlPrefix)
	for _, line := range strings.Split(text, "\n") {
		if name, _, ok := strings.Cut(line, " = "); ok && name == want {
			a.printf("%s\n", line)
			return
		}
	}
	a.eprintf("sysctl: cannot stat %s: No such file or directory\n", want)
	a.exit(1)
}

func (a *app) cmdStatus(args []string) {
	if len(args) != 1 {
		a.extraUsage("status")
	}
	text, err := a.c().Status()
	if err != nil {
		a.fail("status", err)
	}
	a.printf("socket: %s\n%s", client.DefaultSocket(), statusText(text))
}

// statusText is the daemon's status as ukeyctl shows it: its "name:
// value" lines, and the seccomp agent's namespaces, where the daemon
// lists them, as a table under their count. A list it cannot read (a
// newer daemon's) is shown as it came.
func statusText(text string) string {
	nss, listed, err := wire.ParseNamespaces(text)
	if !listed || err != nil {
		return text
	}
	var b strings.Builder
	for line := range strings.SplitSeq(strings.TrimSuffix(text, "\n"), "\n") {
		if strings.HasPrefix(line, "namespace: ") {
			continue
		}
		b.WriteString(line + "\n")
		if !strings.HasPrefix(line, "namespaces: ") || len(nss) == 0 {
			continue
		}
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  KIND\tID\tKEYS\tBYTES\tPROCESSES\tCALLS\tREFUSALS\tCONTAINERS")
		for _, ns := range nss {
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", ns.Kind, ns.ID, ns.Keys, ns.Bytes, ns.Processes, ns.Calls, ns.Refusals,
				strings.Join(ns.Containers, ","))
		}
		tw.Flush()
	}
	return b.String()
}
