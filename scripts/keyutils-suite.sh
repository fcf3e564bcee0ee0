#!/bin/bash
# keyutils-suite.sh [MODE...]: runs keyutils' own test suite (its tests/
# directory, unchanged, from the keyutils 1.6.3 source) against ukeys,
# as root, and prints each test's verdict and a count.
#
#   MODE kernel     the system's keyctl against the kernel (the baseline)
#   MODE socket     ukeyctl as keyctl (a directory first in PATH whose
#                   keyctl is ukeyctl), against a daemon of its own
#   MODE run        the system's keyctl under ukeyctl run, against the
#                   same daemon
#   (default: socket run)
#
# The source comes from KEYUTILS_SRC if set (a directory holding tests/),
# else from Debian's source package (apt-get source keyutils, with a
# deb-src line added for the run) into a temporary directory; the
# original tarball's tests are used, not Debian's patched ones. keyutils
# (keyctl, /etc/request-key.conf) must be installed: the requesting
# tests run the stock request-key.conf. Watches are on wherever
# `keyctl supports notify` says so, as the suite decides itself.
# Each mode takes about four minutes on two cores.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "keyutils-suite.sh: run it as root (the suite's tests need it)" >&2; exit 1; }
command -v keyctl >/dev/null || { echo "keyutils-suite.sh: needs keyutils (apt-get install keyutils)" >&2; exit 1; }
modes=${*:-socket run}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'pkill -f "ukeyd -socket $work/" 2>/dev/null || true; rm -rf "$work"' EXIT

src=${KEYUTILS_SRC:-}
if [ -z "$src" ]; then
	(
		cd "$work"
		sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources >/etc/apt/sources.list.d/ukeys-src.sources
		trap 'rm -f /etc/apt/sources.list.d/ukeys-src.sources' EXIT
		apt-get update -qq >/dev/null
		apt-get source -qq --download-only keyutils=1.6.3-2 >/dev/null 2>&1 || apt-get source -qq --download-only keyutils >/dev/null
		mkdir orig
		tar -C orig -xzf keyutils_1.6.3.orig.tar.gz
	)
	src=$work/orig/keyutils-1.6.3
fi
[ -d "$src/tests" ] || { echo "keyutils-suite.sh: no tests/ in $src" >&2; exit 1; }

bin=$work/bin
mkdir -p "$bin" "$work/path"
(cd "$repo" && go build -o "$bin/" ./cmd/ukeyd ./cmd/ukeyctl)
ln -s "$bin/ukeyctl" "$work/path/keyctl"
export UKEYS_SOCKET=$work/ukeyd.sock
"$bin/ukeyd" -socket "$UKEYS_SOCKET" >"$work/ukeyd.log" 2>&1 &
for _ in $(seq 50); do [ -S "$UKEYS_SOCKET" ] && break; sleep 0.1; done

for mode in $modes; do
	t=$work/tests-$mode
	cp -r "$src/tests" "$t"
	cd "$t"
	tests=$(find . -name runtest.sh | sed -e 's/runtest.sh//g;s/^\.\///;s/\/$//' | grep -v '^$' | sort)
	# shellcheck disable=SC2086 # the list of tests
	case $mode in
	kernel) AUTOMATED=1 bash runtest.sh $tests >"$work/$mode.log" 2>&1 || true ;;
	socket) PATH=$work/path:$PATH AUTOMATED=1 bash runtest.sh $tests >"$work/$mode.log" 2>&1 || true ;;
	run) AUTOMATED=1 "$bin/ukeyctl" run -- bash runtest.sh $tests >"$work/$mode.log" 2>&1 || true ;;
	*) echo "keyutils-suite.sh: no mode $mode" >&2; exit 2 ;;
	esac
	pass=0 fail=0 skip=0
	for test in $tests; do
		out=$test/test.out
		if grep -q "^++++ SKIPPING TEST" "$out" 2>/dev/null; then
			verdict=SKIP skip=$((skip + 1))
		elif grep -q "FINISHED TEST: PASS" "$out" 2>/dev/null; then
			verdict=PASS pass=$((pass + 1))
		else
			verdict=FAIL fail=$((fail + 1))
		fi
		echo "$mode $verdict $test"
	done
	echo "$mode: $pass passed, $skip skipped, $fail failed of $(echo "$tests" | wc -l)"
	cd "$repo"
done
