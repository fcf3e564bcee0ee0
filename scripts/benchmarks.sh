#!/bin/sh
# Regenerates the figures of docs/figures.md and the plots under docs/bench:
# runs every ukeybench scenario at full size (about fifteen minutes on two
# cores), keeps each one's JSON and Markdown table in docs/bench, and
# replaces the table between "<!-- begin NAME -->" and "<!-- end NAME -->"
# in docs/figures.md. The prose around the tables is written by hand.
#
#   scripts/benchmarks.sh              every scenario
#   scripts/benchmarks.sh gp stall     some of them
#   UKEYBENCH_FLAGS=-quick scripts/benchmarks.sh   a smoke run
set -eu
cd "$(dirname "$0")/.."
out=docs/bench
figures=docs/figures.md
mkdir -p "$out"
bin=$(mktemp -d)/ukeybench
go build -o "$bin" ./cmd/ukeybench
scenarios=${*:-gc gp stall read expiry daemon handover density}
for s in $scenarios; do
	# shellcheck disable=SC2086 # UKEYBENCH_FLAGS is a list of flags
	"$bin" ${UKEYBENCH_FLAGS:-} -markdown -save-json "$out/$s.json" -plot "$out" -plot-formats svg "$s" >"$out/$s.md"
	awk -v name="$s" -v file="$out/$s.md" '
		$0 == "<!-- begin " name " -->" { print; while ((getline l < file) > 0) print l; skip = 1; next }
		$0 == "<!-- end " name " -->" { skip = 0 }
		!skip { print }
	' "$figures" >"$figures.new"
	mv "$figures.new" "$figures"
done
rm -r "$(dirname "$bin")"
