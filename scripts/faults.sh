#!/bin/sh
# Fault drills against a running Stockade deployment. Run it as root on a
# libvirt host of the deployment (it kills QEMU processes there) with a
# token of a test tenant; it prints PASS, FAIL or SKIP per scenario and exits
# non-zero when any scenario failed. Every sandbox it creates is removed.
#
#   STOCKADE_URL            the server, e.g. http://127.0.0.1:8080
#   STOCKADE_TOKEN          developer (or admin) token of the tenant whose
#                           work must survive
#   STOCKADE_VICTIM_TOKEN   token of another tenant (or the same one) whose
#                           VM the qemu-kill scenario kills; without it that
#                           scenario is skipped. Use a test tenant: its VM dies.
#   FAULTS_SERVER_PID       pid of `stockade serve` (default: the one process
#                           named stockade, when there is exactly one)
#   FAULTS_SERVER_START     shell command that starts the server again
#                           (e.g. "systemctl start stockade"); without it the
#                           server-kill scenario is skipped
#   FAULTS_LIBVIRTD_RESTART shell command restarting libvirtd; opt-in, as it
#                           touches every VM on the host
#   FAULTS_BURST            creates sent at once in create-burst (default 12)
#   FAULTS_ONLY             space-separated scenarios to run (default: all):
#                           qemu-kill server-kill libvirtd-restart
#                           workspace-full create-burst
#   FAULTS_TEMPLATE         sandbox template (default: the server's default)
#
# Needs curl and jq.
set -u

: "${STOCKADE_URL:?set STOCKADE_URL}"
: "${STOCKADE_TOKEN:?set STOCKADE_TOKEN}"
url=${STOCKADE_URL%/}
burst=${FAULTS_BURST:-12}
only=${FAULTS_ONLY:-qemu-kill server-kill libvirtd-restart workspace-full create-burst}
tmp=$(mktemp -d)
failed=0

for tool in curl jq; do
	command -v "$tool" >/dev/null || {
		echo "faults.sh: $tool is required" >&2
		exit 2
	}
done

log() { echo "  $*" >&2; }
result() { # STATUS scenario detail
	printf '%-4s %-17s %s\n' "$1" "$2" "$3"
	[ "$1" = FAIL ] && failed=1
	return 0
}

# api TOKEN METHOD PATH [BODY]: prints the body, then the status on the last line.
api() {
	tok=$1 method=$2 path=$3
	shift 3
	if [ $# -gt 0 ]; then
		curl -sS -m 300 -X "$method" -H "Authorization: Bearer $tok" -H 'Content-Type: application/json' \
			-d "$1" -w '\n%{http_code}\n' "$url$path"
	else
		curl -sS -m 300 -X "$method" -H "Authorization: Bearer $tok" -w '\n%{http_code}\n' "$url$path"
	fi
}
status_of() { tail -n 1; }
body_of() { sed '$d'; }

spec() { # the body of a sandbox create
	if [ -n "${FAULTS_TEMPLATE:-}" ]; then
		echo "{\"memory_mib\":128,\"timeout_seconds\":1800,\"template\":\"$FAULTS_TEMPLATE\"}"
	else
		echo '{"memory_mib":128,"timeout_seconds":1800}'
	fi
}

create() { # TOKEN -> sandbox id, or empty
	out=$(api "$1" POST /api/v1/sandboxes "$(spec)")
	st=$(printf '%s\n' "$out" | status_of)
	if [ "$st" != 201 ]; then
		log "create sandbox: HTTP $st: $(printf '%s\n' "$out" | body_of | head -c 300)"
		return 1
	fi
	id=$(printf '%s\n' "$out" | body_of | jq -r .id)
	echo "$1 $id" >>"$tmp/created" # a file: create runs in a subshell
	echo "$id"
}

field() { # TOKEN ID FIELD
	api "$1" GET "/api/v1/sandboxes/$2" | body_of | jq -r ".$3 // empty"
}

# execq TOKEN ID CMD_JSON_ARRAY -> exit code (buffered exec), or "error"
execq() {
	out=$(api "$1" POST "/api/v1/sandboxes/$2/exec" "{\"cmd\":$3}")
	st=$(printf '%s\n' "$out" | status_of)
	if [ "$st" != 200 ]; then
		log "exec $3: HTTP $st: $(printf '%s\n' "$out" | body_of | head -c 300)"
		echo error
		return
	fi
	printf '%s\n' "$out" | body_of | jq -r .exit_code
}

# stream TOKEN ID CMD_JSON_ARRAY FILE: a streamed exec in the background; its pid in $stream_pid.
stream() {
	curl -sS -N -m 900 -X POST -H "Authorization: Bearer $1" -H 'Content-Type: application/json' \
		-d "{\"cmd\":$3}" "$url/api/v1/sandboxes/$2/exec?stream=1" >"$4" 2>"$4.err" &
	stream_pid=$!
}

# wait_stdout FILE TEXT SECONDS: until the stream printed TEXT.
wait_stdout() {
	i=0
	while ! jq -j 'select(.type=="stdout") | .data' "$1" 2>/dev/null | grep -q "$2"; do
		i=$((i + 1))
		[ "$i" -gt $(($3 * 10)) ] && return 1
		sleep 0.1
	done
}

# counted FILE N: the stream printed 1..N, each once and in order, and exited 0.
counted() {
	got=$(jq -j 'select(.type=="stdout") | .data' "$1")
	want=$(seq 1 "$2")
	code=$(jq -r 'select(.type=="exit") | .exit_code' "$1")
	[ "$got" = "$want" ] && [ "$code" = 0 ]
}

# the streaming command: prints 1..N, one every half second
counter() { echo "[\"sh\",\"-c\",\"for i in \$(seq 1 $1); do echo \$i; sleep 0.5; done\"]"; }

qemu_pid() { # VM id -> its QEMU pid on this host
	f=/run/libvirt/qemu/stockade-$1.pid
	[ -r "$f" ] && cat "$f"
}

wait_ready() { # SECONDS
	i=0
	until [ "$(curl -s -o /dev/null -w '%{http_code}' -m 5 "$url/readyz")" = 200 ]; do
		i=$((i + 1))
		[ "$i" -gt "$1" ] && return 1
		sleep 1
	done
}

cleanup() {
	if [ -f "$tmp/created" ]; then
		while read -r tok id; do
			n=0 # a host still recovering from a drill answers 503 for a while
			while [ "$(api "$tok" DELETE "/api/v1/sandboxes/$id" 2>/dev/null | status_of)" = 503 ] && [ "$n" -lt 60 ]; do
				n=$((n + 1))
				sleep 1
			done
		done <"$tmp/created"
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wants() { case " $only " in *" $1 "*) return 0 ;; esac; return 1; }

if ! wait_ready 5; then
	echo "faults.sh: $url/readyz is not 200; is the server up?" >&2
	exit 2
fi

# One VM's death touches only that VM: tenant B's QEMU is killed while
# tenant A streams a command; A's command must finish, whole.
if wants qemu-kill; then
	if [ -z "${STOCKADE_VICTIM_TOKEN:-}" ]; then
		result SKIP qemu-kill "set STOCKADE_VICTIM_TOKEN (a test tenant whose VM may die)"
	elif ! a=$(create "$STOCKADE_TOKEN") || ! b=$(create "$STOCKADE_VICTIM_TOKEN"); then
		result FAIL qemu-kill "could not create the two sandboxes"
	else
		vma=$(field "$STOCKADE_TOKEN" "$a" vm_id)
		vmb=$(field "$STOCKADE_VICTIM_TOKEN" "$b" vm_id)
		pid=$(qemu_pid "$vmb")
		if [ "$vma" = "$vmb" ]; then
			result SKIP qemu-kill "both sandboxes landed on VM $vma; use a victim token of another tenant"
		elif [ -z "$pid" ]; then
			result SKIP qemu-kill "VM $vmb does not run on this host (no /run/libvirt/qemu/stockade-$vmb.pid)"
		else
			stream "$STOCKADE_TOKEN" "$a" "$(counter 40)" "$tmp/qemu.ndjson"
			if ! wait_stdout "$tmp/qemu.ndjson" '^3$' 120; then
				result FAIL qemu-kill "the command in $a did not start streaming: $(head -c 300 "$tmp/qemu.ndjson")"
			else
				kill -9 "$pid"
				log "killed QEMU $pid of VM $vmb (sandbox $b) while $a streams"
				wait "$stream_pid"
				sleep 1
				stb=$(field "$STOCKADE_VICTIM_TOKEN" "$b" state)
				sta=$(field "$STOCKADE_TOKEN" "$a" state)
				if ! counted "$tmp/qemu.ndjson" 40; then
					result FAIL qemu-kill "the other VM's command broke: $(tail -n 2 "$tmp/qemu.ndjson" | head -c 400)"
				elif [ "$sta" != running ]; then
					result FAIL qemu-kill "sandbox $a is $sta after another VM died"
				elif [ "$(execq "$STOCKADE_TOKEN" "$a" '["true"]')" != 0 ]; then
					result FAIL qemu-kill "a new command in $a failed after another VM died"
				else
					result PASS qemu-kill "A's command streamed 1..40 and exited 0; victim sandbox is $stb"
				fi
			fi
		fi
	fi
fi

# A crashed server: sandboxes outlive it and work after the restart.
if wants server-kill; then
	spid=${FAULTS_SERVER_PID:-}
	if [ -z "$spid" ] && [ "$(pgrep -xc stockade 2>/dev/null)" = 1 ]; then
		spid=$(pgrep -x stockade)
	fi
	if [ -z "${FAULTS_SERVER_START:-}" ]; then
		result SKIP server-kill "set FAULTS_SERVER_START (the command that starts the server)"
	elif [ -z "$spid" ]; then
		result SKIP server-kill "no single stockade process here: set FAULTS_SERVER_PID"
	elif ! s=$(create "$STOCKADE_TOKEN"); then
		result FAIL server-kill "could not create a sandbox"
	else
		stream "$STOCKADE_TOKEN" "$s" "$(counter 20)" "$tmp/server.ndjson"
		wait_stdout "$tmp/server.ndjson" '^2$' 120 || true
		kill -9 "$spid"
		log "killed the server (pid $spid) during a command in $s"
		wait "$stream_pid" 2>/dev/null
		sh -c "$FAULTS_SERVER_START" >"$tmp/server-start.log" 2>&1 &
		if ! wait_ready 120; then
			result FAIL server-kill "the server was not ready 120 s after $FAULTS_SERVER_START"
		else
			st=$(field "$STOCKADE_TOKEN" "$s" state)
			code=$(execq "$STOCKADE_TOKEN" "$s" '["sh","-c","echo ok"]')
			if [ "$st" != running ] || [ "$code" != 0 ]; then
				result FAIL server-kill "after the restart sandbox $s is $st and a new command answered $code"
			else
				result PASS server-kill "sandbox $s is running and answers after a kill -9 and restart"
			fi
		fi
	fi
fi

# libvirtd restarts under a running command (opt-in: every VM on the host
# sees it). The command must complete.
if wants libvirtd-restart; then
	if [ -z "${FAULTS_LIBVIRTD_RESTART:-}" ]; then
		result SKIP libvirtd-restart "set FAULTS_LIBVIRTD_RESTART (e.g. 'systemctl restart libvirtd')"
	elif ! s=$(create "$STOCKADE_TOKEN"); then
		result FAIL libvirtd-restart "could not create a sandbox"
	else
		stream "$STOCKADE_TOKEN" "$s" "$(counter 40)" "$tmp/libvirtd.ndjson"
		wait_stdout "$tmp/libvirtd.ndjson" '^3$' 120 || true
		sh -c "$FAULTS_LIBVIRTD_RESTART" >"$tmp/libvirtd.log" 2>&1
		log "restarted libvirtd during a command in $s"
		wait "$stream_pid"
		# Give the host a moment to re-adopt the VM, then check it serves.
		i=0
		until [ "$(execq "$STOCKADE_TOKEN" "$s" '["true"]' 2>/dev/null)" = 0 ] || [ "$i" -ge 60 ]; do
			i=$((i + 1))
			sleep 1
		done
		host="sandbox $(field "$STOCKADE_TOKEN" "$s" state), new commands $([ "$i" -lt 60 ] && echo work || echo fail)"
		if counted "$tmp/libvirtd.ndjson" 40 && [ "$i" -lt 60 ]; then
			result PASS libvirtd-restart "the command streamed 1..40 and exited 0 across the restart; $host"
		else
			result FAIL libvirtd-restart "$host; the running command: $(tail -n 1 "$tmp/libvirtd.ndjson" | head -c 300) (it survives only if the guest agent keeps it across the session loss)"
		fi
	fi
fi

# A full /workspace fails the writer, not the sandbox.
if wants workspace-full; then
	if ! s=$(create "$STOCKADE_TOKEN"); then
		result FAIL workspace-full "could not create a sandbox"
	else
		# dd must fail with ENOSPC having written something: the disk was
		# full (4: it failed otherwise, e.g. EDQUOT "Disk quota exceeded").
		code=$(execq "$STOCKADE_TOKEN" "$s" '["sh","-c","dd if=/dev/zero of=/workspace/fill bs=1M 2>/tmp/dd.err && exit 3; grep -q \"No space left on device\" /tmp/dd.err || exit 4; test -s /workspace/fill"]')
		after=$(execq "$STOCKADE_TOKEN" "$s" '["sh","-c","rm -f /workspace/fill && echo ok >/workspace/ok && cat /workspace/ok"]')
		st=$(field "$STOCKADE_TOKEN" "$s" state)
		if [ "$code" != 0 ] || [ "$after" != 0 ] || [ "$st" != running ]; then
			result FAIL workspace-full "fill answered $code (0: dd hit a full disk with ENOSPC), the next command $after, sandbox $st"
		else
			result PASS workspace-full "filled /workspace, freed it, and the sandbox still works"
		fi
	fi
fi

# More creates at once than the pool holds: each is a 201 or a clean 429,
# never a 5xx, and the server stays ready.
if wants create-burst; then
	i=0
	while [ "$i" -lt "$burst" ]; do
		(api "$STOCKADE_TOKEN" POST /api/v1/sandboxes "$(spec)" >"$tmp/burst.$i") &
		i=$((i + 1))
	done
	wait
	ok=0 refused=0 bad=""
	i=0
	while [ "$i" -lt "$burst" ]; do
		st=$(status_of <"$tmp/burst.$i")
		case "$st" in
		201)
			ok=$((ok + 1))
			echo "$STOCKADE_TOKEN $(body_of <"$tmp/burst.$i" | jq -r .id)" >>"$tmp/created"
			;;
		429) refused=$((refused + 1)) ;;
		*) bad="$bad $st" ;;
		esac
		i=$((i + 1))
	done
	if [ -n "$bad" ]; then
		result FAIL create-burst "$burst creates: $ok created, $refused refused (429), others:$bad"
	elif ! wait_ready 10; then
		result FAIL create-burst "the server is not ready after the burst"
	else
		result PASS create-burst "$burst creates: $ok created, $refused refused with 429, no 5xx"
	fi
fi

exit "$failed"
