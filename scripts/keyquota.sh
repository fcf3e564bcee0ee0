#!/bin/bash
# keyquota.sh [N] [new]: what N containers whose key calls ukeys serves
# cost the kernel's key quota. Starts a ukeyd with its seccomp agent, then
# N runc containers at once, detached, each adding a key (in its own key
# namespace, in ukeyd) and holding it; prints root's line of
# /proc/key-users and the count of /proc/keys before, while all N run, and
# after they are gone. The containers are started with runc's
# --no-new-keyring, as docs/containers.md's recipes start them; with
# "new" as second argument, without it (runc's default: a session keyring
# per container, the quota runc#726 and moby#22865 tell of). N is at most
# the agent's 1024 containers. Needs root, runc, jq and the go command.
set -euo pipefail
n=${1:-1000}
flag=--no-new-keyring
[ "${2:-}" = new ] && flag=
[ "$(id -u)" = 0 ] || { echo "keyquota.sh: needs root (runc)" >&2; exit 1; }
for c in runc jq go; do
	command -v "$c" >/dev/null || { echo "keyquota.sh: needs $c" >&2; exit 1; }
done
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d /tmp/keyquota.XXXXXX)
root=$dir/runc
daemon=
cleanup() {
	for id in $(runc --root "$root" list -q 2>/dev/null); do
		runc --root "$root" delete --force "$id" >/dev/null 2>&1 || true
	done
	if [ -n "$daemon" ]; then
		kill "$daemon" 2>/dev/null || true
		wait "$daemon" 2>/dev/null || true
	fi
	rm -rf "$dir"
}
trap cleanup EXIT

mkdir -p "$dir/bundle/rootfs" "$dir/out"
(cd "$repo" && go build -o "$dir/ukeyd" ./cmd/ukeyd &&
	CGO_ENABLED=0 go build -o "$dir/bundle/rootfs/keyprog" ./integration/containers/testdata/keyprog)
# The descriptor limit deploy/systemd/ukeyd.service gives ukeyd, where
# this shell may raise it (CAP_SYS_RESOURCE): the agent's bounds of
# processes and listeners follow from it (agent.Bounds).
if ! (ulimit -n 65536) 2>/dev/null; then
	echo "keyquota.sh: ukeyd keeps this shell's descriptor limit, $(ulimit -n) (65,536 needs CAP_SYS_RESOURCE)" >&2
fi
( (ulimit -n 65536) 2>/dev/null && ulimit -n 65536; exec "$dir/ukeyd" -socket "$dir/ukeyd.sock" -request-key "" -seccomp-agent "$dir/agent.sock") 2>"$dir/ukeyd.log" &
daemon=$!
for _ in $(seq 100); do [ -S "$dir/agent.sock" ] && break; sleep 0.1; done
[ -S "$dir/agent.sock" ] || { echo "keyquota.sh: ukeyd did not start:" >&2; cat "$dir/ukeyd.log" >&2; exit 1; }

runc spec --bundle "$dir/bundle"
jq --arg agent "$dir/agent.sock" '.process.args = ["/keyprog", "add", "held", "100000"] | .process.terminal = false
	| .root.readonly = true
	| .linux.seccomp = {defaultAction: "SCMP_ACT_ALLOW", listenerPath: $agent,
		syscalls: [{names: ["add_key", "keyctl", "request_key"], action: "SCMP_ACT_NOTIFY"}]}' \
	"$dir/bundle/config.json" >"$dir/config.json"
mv "$dir/config.json" "$dir/bundle/config.json"

show() {
	printf '%-8s root %s; /proc/keys %d lines, %d of them _ses.kq-*\n' "$1" \
		"$(grep '^ *0:' /proc/key-users | sed 's/^ *0: *//')" "$(wc -l </proc/keys)" "$(grep -c ' _ses\.kq-' /proc/keys || true)"
}
echo "runc ${flag:-(a session keyring each)}, $n containers; root's /proc/key-users: usage nkeys/nikeys qnkeys/maxkeys qnbytes/maxbytes"
show before
start=$(date +%s)
for i in $(seq "$n"); do
	runc --root "$root" run -d $flag --bundle "$dir/bundle" "kq-$i" >"$dir/out/$i" 2>&1 </dev/null
done
# Every container has added its key (ukeyd answered) before the count.
for _ in $(seq 600); do
	[ "$(cat "$dir"/out/* | grep -c '^add ok$' || true)" -ge "$n" ] && break
	sleep 0.1
done
held=$(cat "$dir"/out/* | grep -c '^add ok$' || true)
echo "$n containers started in $(($(date +%s) - start)) s; $held hold their key in ukeyd; $(runc --root "$root" list -q | wc -l) running;" \
	"ukeyd holds $(ls /proc/"$daemon"/fd | wc -l) descriptors (limit $(awk '/open files/ {print $4}' /proc/"$daemon"/limits))"
show running
for id in $(runc --root "$root" list -q); do
	runc --root "$root" delete --force "$id" >/dev/null 2>&1 || true
done
sleep 1
show after
