#!/bin/bash
# pairs.sh UKEYCTL [N] [ROUNDS]: the cost of a keyctl-style script, pair
# against pair. N times "add user pairI valueI @s" then "print ID", each a
# whole process, first with UKEYCTL (in a session of its own, against the
# daemon at $UKEYS_SOCKET or the default), then with the kernel's keyctl
# (in a keyctl session), ROUNDS times interleaved; prints the milliseconds
# a pair takes with each, and their ratio.
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
for r in $(seq "$rounds"); do
	a=$(PAIRS_INNER=$u "$u" session - "$0" "$u" "$n" 2>/dev/null | tail -1)
	b=$(PAIRS_INNER=$(command -v keyctl) keyctl session - "$0" "$u" "$n" 2>/dev/null | tail -1)
	echo "round $r: ukeyctl $a ms, keyctl $b ms a pair, ratio $(echo "scale=2; $a/$b" | bc)"
done
