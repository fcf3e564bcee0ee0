#!/bin/bash
# pairs.sh UKEYCTL [N] [ROUNDS]: the cost of a keyctl-style script, pair
# against pair. N times "add user pairI valueI @s" then "print ID", each a
# whole process, first with UKEYCTL (in a session of its own, against the
# daemon at $UKEYS_SOCKET or the default), then with the kernel's keyctl
# (in a keyctl session), ROUNDS times interleaved; prints the milliseconds
# a pair takes with each, and their ratio; and, where Go can build it, what
# a Go program that does nothing costs started the same way (the floor).
set -euo pipefail
u=${1:?usage: pairs.sh UKEYCTL [N] [ROUNDS]}
n=${2:-300}
rounds=${3:-3}
if [ "${PAIRS_INNER:-}" != "" ]; then
	start=$(date +%s%N)
	for i in $(seq "$n"); do
		id=$("$PAIRS_INNER" add user "pair$i" "value$i" @s)
		"$PAIRS_INNER" print "$id" >/dev/null
	done
	end=$(date +%s%N)
	echo "scale=3; ($end-$start)/1000000/$n" | bc
	exit 0
fi
command -v keyctl >/dev/null || { echo "pairs.sh: needs keyutils' keyctl" >&2; exit 1; }
# The floor, where Go is there to build it: a Go program that prints a
# number and does nothing else, started the same way. No Go client that
# starts a process per command can cost less than it does.
empty=""
if command -v go >/dev/null; then
	dir=$(mktemp -d)
	trap 'rm -rf "$dir"' EXIT
	printf 'package main\n\nimport "os"\n\nfunc main() { os.Stdout.WriteString("1\\n") }\n' >"$dir/main.go"
	printf 'module empty\n' >"$dir/go.mod"
	if (cd "$dir" && CGO_ENABLED=0 go build -o empty . 2>/dev/null); then
		empty=$dir/empty
	fi
fi
for r in $(seq "$rounds"); do
	a=$(PAIRS_INNER=$u "$u" session - "$0" "$u" "$n" 2>/dev/null | tail -1)
	b=$(PAIRS_INNER=$(command -v keyctl) keyctl session - "$0" "$u" "$n" 2>/dev/null | tail -1)
	line="round $r: ukeyctl $a ms, keyctl $b ms a pair, ratio $(echo "scale=2; $a/$b" | bc)"
	if [ -n "$empty" ]; then
		c=$(PAIRS_INNER=$empty "$0" "$u" "$n" | tail -1)
		line="$line; an empty Go program $c ms, $(echo "scale=2; $c/$b" | bc)x keyctl's"
	fi
	echo "$line"
done
